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
RUN pip install --no-cache-dir . && useradd --system --uid 990 gpuwarden
ENV GPUWARDEN_CONFIG=/etc/gpuwarden/gpuwarden.yaml
ENTRYPOINT ["gpuwarden"]
