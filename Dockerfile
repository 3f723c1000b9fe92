# One image for the agent, the stream worker and the notifier worker.
FROM python:3.11-slim
WORKDIR /opt/gpuwarden
COPY pyproject.toml README.md ./
COPY gpuwarden ./gpuwarden
COPY producers ./producers
COPY streams ./streams
COPY notifiers ./notifiers
COPY history ./history
COPY app ./app
RUN pip install --no-cache-dir . && useradd --system --uid 990 gpuwarden \
    && mkdir -p /var/lib/gpuwarden && chown gpuwarden:gpuwarden /var/lib/gpuwarden
ENV GPUWARDEN_CONFIG=/etc/gpuwarden/gpuwarden.yaml
# Not root: the stream and notifier workers need no privilege (the agent's service runs as root:
# docker-compose.yml says why). A named volume on /var/lib/gpuwarden starts owned by this user.
USER gpuwarden
ENTRYPOINT ["gpuwarden"]
