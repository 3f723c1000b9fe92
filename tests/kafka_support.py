"""pytest plugin: a real Kafka broker for tests marked ``@pytest.mark.kafka``.

Loaded from tests/conftest.py via ``pytest_plugins = ["tests.kafka_support"]``.

* ``kafka_bootstrap`` (session fixture, str): ``$KAFKA_BOOTSTRAP`` when set,
  otherwise ``scripts/kafka-local start`` (a broker this session starts is
  stopped at session end; one that was already running is left alone).
  A broker that cannot be started fails the tests; it never skips them.
* ``kafka_scram`` (session fixture, ``ScramBroker``): a second broker with a
  SASL_PLAINTEXT/SCRAM-SHA-256 listener (``scripts/kafka-local start --scram``),
  or ``$KAFKA_SCRAM_BOOTSTRAP`` + ``$KAFKA_SCRAM_USERNAME`` + ``$KAFKA_SCRAM_PASSWORD``.
* ``own_broker`` (function fixture, ``OwnBroker``): a broker of the test's own, which it may
  ``.run("kill")`` (SIGKILL) and ``.run("restart")`` (same port and data).
* helpers: ``unique_topic``, ``create_topic``, ``produce``, ``consume_all``,
  ``list_topics``, ``topic_config``; the async ones pass ``**client_kw`` to aiokafka
  (e.g. ``**kafka_scram.client_kwargs()``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

REPO_ROOT = Path(__file__).resolve().parent.parent
KAFKA_LOCAL = REPO_ROOT / "scripts" / "kafka-local"
START_TIMEOUT_S = 300  # includes a first-time Maven download


def kafka_local(
    *args: str, timeout: float = START_TIMEOUT_S, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run scripts/kafka-local (stdlib only) with extra ``env`` on top of os.environ."""
    return subprocess.run(
        [sys.executable, str(KAFKA_LOCAL), *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap address ``host:port`` of a running Kafka broker."""
    env = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    if env:
        yield env
        return
    was_running = kafka_local("status", timeout=30).returncode == 0
    try:
        proc = kafka_local("start")
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/kafka-local start timed out after {START_TIMEOUT_S}s", pytrace=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        _start_failed(proc, "start")
    try:
        yield lines[-1].strip()
    finally:
        if not was_running:
            kafka_local("stop", timeout=60)


@dataclass(frozen=True)
class OwnBroker:
    """A broker of one test's own (``KAFKA_LOCAL_DIR=<tmp>``): it may be killed and restarted."""

    bootstrap: str
    env: dict[str, str]

    def run(self, command: str) -> None:
        """``kafka-local kill`` (SIGKILL, data kept) or ``restart`` (same port and data)."""
        proc = kafka_local(command, env=self.env, timeout=180)
        assert proc.returncode == 0, f"kafka-local {command}: {proc.stderr.strip()}"


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[OwnBroker]:
    """A separate broker for a test that kills it; stopped afterwards."""
    env = {"KAFKA_LOCAL_DIR": str(tmp_path / "kafka")}
    proc = kafka_local("start", env=env)
    if proc.returncode != 0 or not proc.stdout.strip():
        _start_failed(proc, "start (own broker)")
    try:
        yield OwnBroker(proc.stdout.strip().splitlines()[-1], env)
    finally:
        kafka_local("stop", env=env, timeout=60)


def kafka_local_address(*flags: str) -> str | None:
    """Bootstrap address of the broker scripts/kafka-local runs now, or None."""
    proc = kafka_local("status", *flags, timeout=30)
    parts = proc.stdout.split()
    return parts[1] if proc.returncode == 0 and len(parts) > 1 else None


@dataclass(frozen=True)
class ScramBroker:
    """A broker whose client listener wants SASL/SCRAM credentials."""

    bootstrap: str
    username: str
    password: str
    mechanism: str = "SCRAM-SHA-256"
    security_protocol: str = "SASL_PLAINTEXT"

    def client_kwargs(self, password: str | None = None) -> dict[str, str]:
        """Keyword arguments for aiokafka producers/consumers/admin clients."""
        return {
            "security_protocol": self.security_protocol,
            "sasl_mechanism": self.mechanism,
            "sasl_plain_username": self.username,
            "sasl_plain_password": self.password if password is None else password,
        }


def _start_failed(proc: subprocess.CompletedProcess[str], what: str) -> None:
    pytest.fail(
        f"could not start Kafka (scripts/kafka-local {what}, exit {proc.returncode}); "
        f"set KAFKA_BOOTSTRAP to use an existing broker.\n{proc.stderr.strip()}",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def kafka_scram() -> Iterator[ScramBroker]:
    """A SASL_PLAINTEXT + SCRAM-SHA-256 broker (separate from ``kafka_bootstrap``)."""
    env = os.environ.get("KAFKA_SCRAM_BOOTSTRAP", "").strip()
    if env:
        yield ScramBroker(
            env, os.environ["KAFKA_SCRAM_USERNAME"], os.environ["KAFKA_SCRAM_PASSWORD"],
            os.environ.get("KAFKA_SCRAM_MECHANISM", "SCRAM-SHA-256"),
        )
        return
    was_running = kafka_local("status", "--scram", timeout=30).returncode == 0
    try:
        proc = kafka_local("start", "--scram")
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/kafka-local start --scram timed out after {START_TIMEOUT_S}s", pytrace=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        _start_failed(proc, "start --scram")
    fields = dict(line.split("=", 1) for line in lines[:-1] if "=" in line)
    try:
        yield ScramBroker(
            lines[-1].strip(), fields["KAFKA_SASL_USERNAME"], fields["KAFKA_SASL_PASSWORD"],
            fields["KAFKA_SASL_MECHANISM"], fields["KAFKA_SECURITY_PROTOCOL"],
        )
    finally:
        if not was_running:
            kafka_local("stop", "--scram", timeout=60)


def unique_topic(prefix: str = "test") -> str:
    """A topic name no other test (or earlier run on a reused broker) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def create_topic(
    bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None,
    **client_kw: object,
) -> None:
    """Create ``name`` (replication factor 1); an existing topic is fine."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_kw)
    await admin.start()
    try:
        topic = NewTopic(name, num_partitions=partitions, replication_factor=1,
                         topic_configs=config or {})
        try:
            resp = await admin.create_topics([topic])
        except TopicAlreadyExistsError:
            return
        for _name, code, *rest in getattr(resp, "topic_errors", []):
            if code not in (0, TopicAlreadyExistsError.errno):
                raise RuntimeError(f"create_topics({name}) failed: error {code} {rest}")
    finally:
        await admin.close()


async def list_topics(bootstrap: str, **client_kw: object) -> set[str]:
    """Names of the topics on the broker."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_kw)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def topic_config(bootstrap: str, topic: str, **client_kw: object) -> dict[str, str]:
    """The effective configuration of ``topic`` (name -> value)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_kw)
    await admin.start()
    try:
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    out: dict[str, str] = {}
    for resp in responses:
        for err, msg, _rtype, _name, entries in resp.resources:
            if err:
                raise RuntimeError(f"describe_configs({topic}) failed: error {err} {msg}")
            out.update({entry[0]: entry[1] for entry in entries})
    return out


async def produce(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes | None, bytes]], **producer_kw: object
) -> None:
    """Send ``(key, value)`` records in order and wait for all acks."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **producer_kw)
    await producer.start()
    try:
        futures = [await producer.send(topic, value=value, key=key) for key, value in records]
        await producer.flush()
        for fut in futures:
            await fut
    finally:
        await producer.stop()


async def consume_all(
    bootstrap: str, topic: str, expected: int, timeout: float = 300.0, **consumer_kw: object
) -> list[ConsumerRecord]:
    """Read ``topic`` from the beginning until ``expected`` records arrived.

    Raises ``TimeoutError`` (with the count so far) if they do not arrive in time: ``timeout``
    only catches a hang (it returns once they are there; #33: 20-30 s failed on a busy machine).
    Without ``group_id`` in ``consumer_kw`` no offsets are committed.
    """
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **consumer_kw
    )
    await consumer.start()
    out: list[ConsumerRecord] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(out) < expected:
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError(f"consumed {len(out)}/{expected} records from {topic} in {timeout}s")
            batch = await consumer.getmany(timeout_ms=int(min(left, 1.0) * 1000))
            for records in batch.values():
                out.extend(records)
        return out
    finally:
        await consumer.stop()
