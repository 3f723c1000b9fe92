"""An agent never publishes a record the workers could only dead-letter in part (over
``limits.max_record_bytes``): it is logged as an error, counted, and neither spooled nor sent."""

from __future__ import annotations

import json
import logging

from gpuwarden.app.settings import validate_settings
from gpuwarden.contract import GpuProcess, GpuSample, NodeSnapshot
from gpuwarden.spool import Spool
from gpuwarden.producers.agent import Sink
from gpuwarden.producers.publisher import Publisher

LIMIT = 16 << 10


def snap(seq: int, processes: int = 0) -> NodeSnapshot:
    return NodeSnapshot.of(
        node="n1", seq=seq, boot_id="b", agent_version="t", ts=1_790_000_000.0 + seq,
        gpus=[GpuSample(index=0, uuid="GPU-0", util_gpu=50.0)],
        processes=[GpuProcess(pid=p, gpu_index=0, command="python train.py " + "x" * 200) for p in range(processes)])


def test_publisher_refuses_oversized_records(tmp_path, caplog) -> None:
    spool = Spool(tmp_path / "spool.db")
    pub = Publisher(spool, "127.0.0.1:9", max_record_bytes=LIMIT)
    with caplog.at_level(logging.ERROR):
        pub.submit([snap(1), snap(2, processes=200), snap(3)])
    assert [json.loads(r.value)["seq"] for r in spool.pending()] == [1, 3]
    assert pub.rejected == 1
    assert "node_snapshot/2 of n1" in caplog.text and f"over limits.max_record_bytes ({LIMIT})" in caplog.text


def test_file_output_refuses_them_too(tmp_path) -> None:
    settings = validate_settings({"limits": {"max_record_bytes": LIMIT}})
    out = tmp_path / "out.jsonl"
    sink = Sink(str(out), settings)
    sink.put([snap(1), snap(2, processes=200)])
    sink.file.close()
    assert [json.loads(x)["seq"] for x in out.read_text().splitlines()] == [1]
