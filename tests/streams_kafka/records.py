"""Hand-built contract records and small Kafka helpers shared by the streams_kafka tests."""

from __future__ import annotations

import json
import time
from typing import Any

from gpuwarden.app.settings import validate_settings
from gpuwarden.contract import GpuEvent, GpuSample, NodeSnapshot, encode, record_key
from tests.kafka_support import unique_topic

#: Yesterday, 00:00 UTC: recent enough for live workers (records older than limits.max_past_skew,
#: 7 days, are dead-lettered), and a whole number of days, so buckets and windows align.
T0 = float(int(time.time()) // 86400 * 86400 - 86400)


def settings_for(bootstrap: str, partitions: int = 2, **engine: Any) -> Any:
    """Settings with a unique topic prefix (hence a unique consumer group and app id) for one test."""
    prefix = unique_topic("gw") + "."
    return validate_settings({
        "kafka": {"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": partitions},
        "engine": engine,
    })


def snapshot(node: str, seq: int, ts: float, gpus: int = 2) -> NodeSnapshot:
    return NodeSnapshot.of(node=node, seq=seq, boot_id="b1", agent_version="test", ts=ts,
                        gpus=[GpuSample(index=i, uuid=f"GPU-{node}-{i}", util_gpu=50.0) for i in range(gpus)])


def xid(node: str, seq: int, ts: float, code: int) -> GpuEvent:
    return GpuEvent(node=node, seq=seq, boot_id="b1", ts=ts, kind="xid", source="sim", code=code, gpu_index=0)


def keyed(records: list[Any]) -> list[tuple[bytes, bytes]]:
    return [(record_key(r).encode(), encode(r)) for r in records]


def transition_ids(values: list[bytes], skip: frozenset[str] = frozenset()) -> list[tuple[str, str, float]]:
    """(fingerprint, state, started_at) of each alert transition: the consumers' dedup key
    (``skip``: the transitions of these rules are left out)."""
    out = []
    for v in values:
        d = json.loads(v)
        if d["rule"] not in skip:
            out.append((d["fingerprint"], d["state"], d["started_at"]))
    return out
