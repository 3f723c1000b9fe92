"""Bad input on real Kafka: 1,000 fuzzed records into gpu.samples, two `gpuwarden streams` workers.

Each bad record must land in ``gpu.samples.dlq`` with its original bytes, its
offset and the validation error; the workers must keep running and still
process a valid record sent afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from gpuwarden.contract import ContractError, NodeSnapshot, TaskMetric, TaskMetrics, Topics, decode, encode
from gpuwarden.streams.statewire import app_id
from tests.kafka_support import consume_all, create_topic, produce
from tests.streams_kafka.records import settings_for, snapshot
from tests.streams_kafka.workers import read_to_end, wait_for, workers, write_config

pytestmark = pytest.mark.kafka

N_BAD = 1000
MAX_BYTES = 16 * 1024
NODE = "fuzz-node"


def _valid() -> dict[str, Any]:
    return json.loads(encode(snapshot(NODE, 1, time.time() - 60, gpus=2)))


_NOT_SCALAR = st.one_of(st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))


@st.composite
def bad_snapshot(draw: Any) -> bytes:
    """Bytes that break the contract in one of the ways a broken agent (or attacker) would."""
    kind = draw(st.sampled_from(["garbage", "wrong_type", "nan", "negative", "ragged", "future", "oversized"]))
    doc = _valid()
    if kind == "garbage":
        return draw(st.binary(max_size=300).filter(lambda b: not b.lstrip().startswith(b"{")))
    if kind == "wrong_type":
        doc[draw(st.sampled_from(["seq", "ts", "node", "boot_id", "agent_version"]))] = draw(_NOT_SCALAR)
        if draw(st.booleans()):
            doc["gpus"] = draw(st.one_of(st.text(max_size=10), st.integers()))
    elif kind == "nan":
        field = draw(st.sampled_from(["util_gpu", "power_w", "temp_gpu_c"]))
        doc["gpus"][field][0] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    elif kind == "negative":
        field = draw(st.sampled_from(["mem_used_bytes", "mem_total_bytes", "energy_mj"]))
        doc["gpus"][field][draw(st.integers(0, 1))] = draw(st.integers(max_value=-1))
    elif kind == "ragged":  # a column longer or shorter than the GPU index
        column = doc["gpus"][draw(st.sampled_from(["uuid", "util_gpu", "power_w", "mem_used_bytes"]))]
        if draw(st.booleans()):
            column.pop()
        else:
            column.append(column[0])
    elif kind == "future":
        doc["ts"] = time.time() + draw(st.floats(min_value=3600, max_value=1e9))
    else:
        n = draw(st.integers(5, 12))
        doc["processes"] = {"pid": list(range(n)), "gpu_index": [0] * n, "command": ["x" * 4000] * n}
    return json.dumps(doc).encode()


def fuzzed(n: int) -> list[bytes]:
    out: list[bytes] = []

    @hsettings(max_examples=n, database=None, derandomize=True, deadline=None,
               suppress_health_check=list(HealthCheck))
    @given(bad_snapshot())
    def collect(raw: bytes) -> None:
        out.append(raw)

    collect()
    assert len(out) >= n, f"hypothesis gave only {len(out)} examples"
    return out[:n]


def expected_error(raw: bytes) -> ContractError:
    try:
        decode(raw, NodeSnapshot, now=time.time(), max_bytes=MAX_BYTES)
    except ContractError as e:
        return e
    raise AssertionError(f"generator made a valid record: {raw[:200]!r}")


def _task_metric_batches(node: str, ts: float) -> tuple[bytes, bytes]:
    """A batch of three task metrics whose second is bad (a negative step time), and a broken one."""
    doc = json.loads(encode(TaskMetrics.of([TaskMetric(node=node, ts=ts + i, task="c", task_id=f"t{i}", kind="step",
                                                       step=i, step_time_s=1.0) for i in range(3)])))
    doc["metrics"][1]["step_time_s"] = -1.0
    hurt = json.dumps(doc).encode()
    return hurt, hurt[:-7]


async def test_fuzzed_samples_land_in_dlq_and_workers_keep_going(kafka_bootstrap: str, tmp_path: Path) -> None:
    bad = fuzzed(N_BAD)
    want = [expected_error(raw) for raw in bad]
    # A snapshot every batch: a key's state is on the changelog once a batch applied it (else
    # only at the task's first snapshot and after engine.snapshot_interval).
    settings = settings_for(kafka_bootstrap, partitions=2, snapshot_records=1)
    settings.limits.max_record_bytes = MAX_BYTES
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics):
        await create_topic(kafka_bootstrap, t, partitions=2)
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    changelog = f"{app_id(settings)}-node-state-changelog"
    after = snapshot("after-fuzz", 1, time.time() - 30)
    hurt, broken = _task_metric_batches("metrics-node", time.time() - 60)

    with workers(config, tmp_path, "w1", "w2") as (w1, w2):
        await produce(kafka_bootstrap, topics.samples, [(NODE.encode(), raw) for raw in bad])
        await produce(kafka_bootstrap, topics.metrics, [(b"metrics-node", hurt), (b"metrics-node", broken)])
        dlq = await consume_all(kafka_bootstrap, Topics.dlq(topics.samples), expected=N_BAD)
        metric_letters = await consume_all(kafka_bootstrap, Topics.dlq(topics.metrics), expected=2)
        await produce(kafka_bootstrap, topics.samples, [(b"after-fuzz", encode(after))])

        async def processed() -> bool:
            keys = {r.key for r in await read_to_end(kafka_bootstrap, changelog, 2)}
            return {b"after-fuzz", b"metrics-node"} <= keys  # the batch's good items were applied

        await wait_for(processed, "the valid record after the fuzzed ones, the batch's good items")
        assert w1.alive() and w2.alive(), w1.tail() + "\n----\n" + w2.tail()

    item, whole = sorted((json.loads(r.value) for r in metric_letters), key=lambda d: d["offset"])
    assert item["error"].startswith("metrics[1].step_time_s: ") and whole["error"].startswith("<record>: Invalid JSON")
    assert json.loads(base64.b64decode(item["value_b64"]))["metrics"] == [json.loads(hurt)["metrics"][1]]
    assert base64.b64decode(whole["value_b64"]) == broken

    letters = {(r.partition, json.loads(r.value)["offset"]): json.loads(r.value) for r in dlq}
    assert len(letters) == N_BAD == len(dlq)  # each bad record exactly once
    by_hash: dict[str, tuple[bytes, ContractError]] = {}
    for raw, err in zip(bad, want):
        by_hash[hashlib.sha256(raw).hexdigest()] = (raw, err)
    for d in letters.values():
        assert d["value_sha256"] in by_hash, f"DLQ holds bytes that were never sent: {d['value_b64'][:80]!r}"
        raw, err = by_hash[d["value_sha256"]]
        kept = base64.b64decode(d["value_b64"])
        # the value whole, or (over the record limit) its first 16 KiB: nothing else is lost
        assert kept == (raw if len(raw) <= MAX_BYTES else raw[:MAX_BYTES]) and d["value_bytes"] == len(raw)
        assert d["truncated"] == (len(raw) > MAX_BYTES)
        for field in err.fields:
            assert field in d["error"], (field, d["error"])
        assert d["error"].split(" is ")[0] == str(err).split(" is ")[0]  # same message, up to the clock
    assert all(d["topic"] == topics.samples and d["key_b64"] == base64.b64encode(NODE.encode()).decode()
               for d in letters.values())
    assert sorted(d["value_sha256"] for d in letters.values()) == sorted(hashlib.sha256(b).hexdigest() for b in bad)
