"""Kafka connection options in one place: ``settings.kafka`` → aiokafka kwargs.

Every Kafka user (agent publisher, stream workers, notifier, replay, import)
builds its clients from here, so SASL/SCRAM and TLS work the same everywhere.
aiokafka reports a refused login only as "Unable to bootstrap" (the reason is
in its log), so :func:`start_client` asks the broker once more on a bare
connection and raises :class:`KafkaConnectError` with the real reason; the
password never appears in it.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

from gpuwarden.config import CommonSettings, KafkaConfig
from gpuwarden.topics import TopicSpec

#: aiokafka connection kwargs; the rest are client-specific (acks, group_id, …).
_CONN_KEYS = ("client_id", "security_protocol", "sasl_mechanism", "sasl_plain_username",
              "sasl_plain_password", "ssl_context")


class KafkaConnectError(Exception):
    """The cluster could not be reached or refused us; says which and why, never the password."""


def ssl_context(kafka: KafkaConfig) -> ssl.SSLContext | None:
    """A verifying TLS context (``ssl_cafile`` or the system CAs) for SSL/SASL_SSL, else None."""
    if kafka.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    return ssl.create_default_context(cafile=str(kafka.ssl_cafile) if kafka.ssl_cafile else None)


def kafka_kwargs(kafka: KafkaConfig) -> dict[str, Any]:
    """aiokafka kwargs for a ``KafkaConfig``: bootstrap, client id, SASL and TLS where configured."""
    kw: dict[str, Any] = {"bootstrap_servers": kafka.bootstrap, "client_id": kafka.client_id,
                          "security_protocol": kafka.security_protocol}
    if kafka.security_protocol.startswith("SASL_"):
        kw["sasl_mechanism"] = kafka.sasl_mechanism or "PLAIN"
        kw["sasl_plain_username"] = kafka.sasl_username
        if kafka.sasl_password is not None:
            kw["sasl_plain_password"] = kafka.sasl_password.resolve().get_secret_value()
    context = ssl_context(kafka)
    if context is not None:
        kw["ssl_context"] = context
    return kw


def client_kwargs(settings: CommonSettings) -> dict[str, Any]:
    """aiokafka kwargs for ``settings.kafka`` (producers, consumers, admin clients)."""
    return kafka_kwargs(settings.kafka)


async def diagnose(kw: dict[str, Any], timeout_s: float = 10.0) -> str:
    """Why the first bootstrap server refuses a connection with ``kw`` ('' if it accepts)."""
    from aiokafka.conn import create_conn

    host, _, port = kw["bootstrap_servers"].split(",")[0].strip().rpartition(":")
    conn_kw = {k: kw[k] for k in _CONN_KEYS if k in kw}
    try:
        conn = await asyncio.wait_for(create_conn(host, int(port), request_timeout_ms=int(timeout_s * 1000),
                                                  **conn_kw), timeout_s)
    except asyncio.TimeoutError:
        return f"no answer within {timeout_s:.0f} s"
    except Exception as e:  # noqa: BLE001 - the reason is what we want
        name = type(e).__name__
        if "Sasl" in name or "Authentication" in name:
            who = kw.get("sasl_plain_username")
            return (f"authentication failed for user {who!r} ({kw.get('sasl_mechanism')}): "
                    "wrong username or password")
        if isinstance(e, ssl.SSLError):
            return f"TLS handshake failed ({e.reason or name}); check kafka.ssl_cafile"
        return f"{name}: {e}"
    conn.close()
    return ""


async def start_client(client: Any, kw: dict[str, Any], timeout_s: float = 30.0) -> None:
    """``await client.start()`` within ``timeout_s``; on failure raise :class:`KafkaConnectError`."""
    try:
        await asyncio.wait_for(client.start(), timeout_s)
    except Exception as e:  # noqa: BLE001 - any start failure is explained the same way
        try:
            await asyncio.wait_for(client.stop(), 5)
        except Exception:  # noqa: BLE001 - closing a client that never connected
            pass
        why = await diagnose(kw, min(timeout_s, 10.0)) or f"{type(e).__name__}: {e}"
        raise KafkaConnectError(f"Kafka {kw['bootstrap_servers']}: {why}") from None


async def produce_records(records: Iterable[Any], client_kw: dict[str, Any], topic_prefix: str = "", *,
                          partitions: int, event_time: bool = False, batch: int = 1000,
                          replication_factor: int = 1) -> int:
    """Send contract records to their topics under their keys (acks=all, idempotent), each node's
    task metrics between two of its other records as one batch; returns how many Kafka records.
    The pipeline's topics are created first where missing, with ``partitions`` (the workers'
    ``kafka.partitions``: a caller always says, as a default here would race the workers' own).

    ``event_time`` stamps each Kafka record with the record's own ``ts`` (as a live agent's
    would be), so ``offsets_for_times`` finds it by event time; without it Kafka stamps the
    send time, which keeps imported old history clear of time-based retention.
    """
    from aiokafka import AIOKafkaProducer

    from gpuwarden.contract import Topics, batch_task_metrics, encode, record_key

    from gpuwarden.topics import CONTROL, data_topics

    topics, n = Topics(topic_prefix), 0
    # control too: an imported history holds silences and acks (never left to auto-creation)
    await ensure_topics(client_kw, {**data_topics(topics), topics.control: CONTROL}, partitions=partitions,
                        replication_factor=replication_factor)
    producer = AIOKafkaProducer(**client_kw, acks="all", enable_idempotence=True, linger_ms=20)
    await start_client(producer, client_kw)
    try:
        it = iter(batch_task_metrics(records))
        while chunk := list(islice(it, batch)):
            futs = [await producer.send(topics.for_record(r), key=record_key(r).encode(), value=encode(r),
                                        timestamp_ms=int(r.ts * 1000) if event_time else None)
                    for r in chunk]
            for f in futs:
                await f
            n += len(chunk)
    finally:
        await producer.stop()
    return n


#: Kafka's error code for a topic that exists (a racing creator got there first): not an error here.
TOPIC_ALREADY_EXISTS = 36
#: A topic just created has no leader for a moment; this long for every partition to get one.
LEADERS_S = 30.0


class TopicError(Exception):
    """The broker refused to create a topic (bad replication factor, a policy); says which and why."""


async def ensure_topics(client_kw: Mapping[str, Any], specs: Mapping[str, TopicSpec], *, partitions: int,
                        replication_factor: int) -> dict[str, int]:
    """Create the topics of ``specs`` that are missing; returns every one's partition count once
    each partition has a leader. Raises :class:`gpuwarden.kafka.KafkaConnectError` when the
    cluster cannot be reached and :class:`TopicError` when it refuses a topic."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(**client_kw)
    await start_client(admin, dict(client_kw))
    try:
        counts = await _counts(admin, list(specs))
        new = [NewTopic(t, s.partitions or partitions, replication_factor, topic_configs=dict(s.config))
               for t, s in specs.items() if t not in counts]
        if new:
            resp = await admin.create_topics(new)
            refused = [f"{e[0]}: {e[-1] or f'error {e[1]}'}" for e in resp.topic_errors
                       if e[1] not in (0, TOPIC_ALREADY_EXISTS)]
            if refused:
                raise TopicError("the broker refused to create topics: " + "; ".join(refused))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADERS_S
        while True:
            counts = await _counts(admin, list(specs), led=True)
            missing = sorted(set(specs) - set(counts))
            if not missing:
                return counts
            if loop.time() > deadline:
                raise TopicError(f"topics without a leader after {LEADERS_S:.0f} s: {', '.join(missing)}")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def _counts(admin: Any, names: list[str], led: bool = False) -> dict[str, int]:
    """Partition counts of the topics among ``names`` that exist (with ``led``: whose every
    partition has a leader). Only topics the cluster lists are described: aiokafka's
    ``describe_topics`` is a metadata request that lets the broker auto-create what it names."""
    existing = set(await admin.list_topics()) & set(names)
    out = {}
    for d in await admin.describe_topics(sorted(existing)) if existing else []:
        parts = d["partitions"]
        if d["error_code"] == 0 and parts and (not led or all(p["leader"] >= 0 for p in parts)):
            out[d["topic"]] = len(parts)
    return out
