"""The wire contract: every model round-trips; malformed records are rejected naming the field."""

from __future__ import annotations

import base64
import hashlib
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwarden.contract import (
    Ack,
    AlertState,
    AlertTransition,
    Baseline,
    CatalogueEntry,
    ContractError,
    DEAD_LETTER_PREFIX,
    DeadLetter,
    EventKind,
    Evidence,
    GpuEvent,
    GpuProcess,
    GpuSample,
    Matcher,
    NodeSnapshot,
    OnCallOverride,
    Severity,
    Silence,
    TaskMetric,
    TaskMetricItem,
    TaskMetricKind,
    TaskMetrics,
    batch_task_metrics,
    salvage_task_metrics,
    unbatch,
    TaskSummary,
    Tier,
    Topics,
    dead_letter,
    decode,
    unknown_fields,
    decode_control,
    encode,
    record_key,
)

NOW = 1_790_000_000.0


def snapshot(**over) -> NodeSnapshot:
    base = dict(
        node="node-00", ts=NOW, seq=7, boot_id="b-1", agent_version="0.1.0",
        driver_version="580.159.04", cuda_version="13.0", interval_s=1.0,
        gpus=[GpuSample(index=0, uuid="GPU-aaa", name="NVIDIA H200", util_gpu=97.0,
                        mem_used_bytes=70 << 30, mem_total_bytes=141 << 30, temp_gpu_c=61,
                        power_w=612.5, power_limit_w=700, clock_event_reasons=4,
                        clock_event_names=["sw_power_cap"], fan_pct=None, nvlink_up=None)],
        processes=[GpuProcess(pid=4242, gpu_index=0, used_memory_bytes=69 << 30, uid=1001,
                              user="alice", container_id="c0ffee", slurm_job_id="12345",
                              task="llama-pretrain", task_id="slurm-12345", command="python train.py")],
    )
    base.update(over)
    return NodeSnapshot.of(**base)


ALL_RECORDS = [
    snapshot(),
    GpuEvent(node="node-00", ts=NOW, seq=8, boot_id="b-1", kind=EventKind.XID, source="kmsg",
             gpu_index=0, gpu_uuid="GPU-aaa", code=79, message="NVRM: Xid (PCI:0000:3b:00): 79",
             catalogue=CatalogueEntry(code=79, meaning="GPU has fallen off the bus",
                                      action="RESTART_BM", severity=Severity.FATAL)),
    TaskMetrics(node="node-00", metrics=[
        TaskMetricItem(ts=NOW, task="llama-pretrain", task_id="slurm-12345", kind=TaskMetricKind.STEP, step=100,
                       step_time_s=1.2, data_wait_s=0.1, comm_s=0.2),
        TaskMetricItem(ts=NOW - 0.5, task="llama-pretrain", task_id="slurm-12345", kind=TaskMetricKind.THROUGHPUT,
                       throughput=5e4, throughput_unit="tokens/s")]),
    TaskSummary(ts=NOW, task="llama-pretrain", task_id="slurm-12345", node="node-00",
                window_s=60, samples=60, gpus=8, stats={"util_gpu_mean": 93.5}),
    AlertTransition(ts=NOW, fingerprint="fp1", rule="memory_leak", tier=Tier.ATTENTION,
                    state=AlertState.FIRING, labels={"node": "node-00", "gpu": "0"},
                    started_at=NOW, summary="memory grows 2.1 GiB/h",
                    evidence=Evidence(values={"mem_used_gib": 70.0}, slope=2.1, slope_unit="GiB/h",
                                      baseline=Baseline(median=1, mad=0.1, low=0.7, high=1.3, samples=99))),
    Silence(id="s1", matchers=[Matcher(label="node", value="node-00")], starts_at=NOW,
            ends_at=NOW + 3600, created_by="bob"),
    Ack(fingerprint="fp1", by="bob", at=NOW),
    OnCallOverride(id="o1", schedule="gpu-oncall", user="carol", starts_at=NOW, ends_at=NOW + 86400),
    dead_letter("gpu.samples", b"\xff\x00garbage", "record: not JSON", key=b"node-00",
                partition=0, offset=3, received_at=NOW),
]


@pytest.mark.parametrize("record", ALL_RECORDS, ids=lambda r: type(r).__name__)
def test_every_model_round_trips(record):
    data = encode(record)
    assert json.loads(data)["schema"].endswith("/2" if isinstance(record, (NodeSnapshot, DeadLetter)) else "/1")
    assert decode(data) == record              # dispatched on schema
    assert decode(data, type(record)) == record
    assert encode(decode(data)) == data


def test_unsupported_fields_stay_null_not_zero():
    data = json.loads(encode(snapshot()))
    assert data["gpus"]["fan_pct"] == [None]
    assert data["gpus"]["nvlink_up"] == [None]


def test_snapshot_tables_are_columns():
    snap = snapshot(gpus=[GpuSample(index=i, uuid=f"GPU-{i}", util_gpu=10.0 * i) for i in range(3)])
    data = json.loads(encode(snap))
    assert data["gpus"]["index"] == [0, 1, 2] and data["gpus"]["util_gpu"] == [0.0, 10.0, 20.0]
    assert len(snap.gpus) == 3 and snap.gpus.uuid[2] == "GPU-2"
    assert [g.util_gpu for g in decode(encode(snap)).gpus.rows()] == [0.0, 10.0, 20.0]
    assert snap.processes.rows()[0] == snapshot().processes.rows()[0]


def test_snapshot_columns_of_unequal_length_named():
    err = _bad(lambda d: d["gpus"]["util_gpu"].append(50.0))
    assert err.fields == ["gpus"] and "util_gpu: 2 values, index has 1" in str(err)


def test_snapshot_column_left_out_is_null_but_required_ones_are_not():
    doc = json.loads(encode(snapshot()))
    del doc["gpus"]["fan_pct"], doc["gpus"]["clock_event_names"]
    snap = decode(json.dumps(doc))
    assert snap.gpus.fan_pct == [None] and snap.gpus.clock_event_names == [[]]
    err = _bad(lambda d: d["gpus"].pop("uuid"))
    assert err.fields == ["gpus.uuid"]


def test_snapshot_v2_rejects_rows_and_v1_is_an_unknown_version():
    """A node_snapshot/2 takes tables as columns; node_snapshot/1 (rows, never released) is
    not read: dead-lettered with the versions this reader knows."""
    snap = snapshot()
    rows = json.loads(encode(snap))
    rows["gpus"] = [g.model_dump(mode="json") for g in snap.gpus.rows()]
    rows["processes"] = [p.model_dump(mode="json") for p in snap.processes.rows()]
    with pytest.raises(ContractError, match="gpus: Input should be an object"):
        decode(json.dumps(rows))
    for model in (None, NodeSnapshot):
        with pytest.raises(ContractError) as ei:
            decode(json.dumps({**rows, "schema": "node_snapshot/1"}), model)
        assert str(ei.value) == ("schema: 'node_snapshot/1' is a version this reader does not know (it reads "
                                 "node_snapshot/2): upgrade the reader before the writers")


def test_control_records_dispatch_on_schema():
    for rec in ALL_RECORDS[5:8]:
        assert decode_control(encode(rec)) == rec


def _bad(mutate) -> ContractError:
    doc = json.loads(encode(snapshot()))
    mutate(doc)
    with pytest.raises(ContractError) as ei:
        decode(json.dumps(doc).replace('"__NaN__"', "NaN"), now=NOW)
    return ei.value


def test_missing_field_named():
    err = _bad(lambda d: d.pop("boot_id"))
    assert "boot_id" in str(err) and "required" in str(err).lower()
    assert err.fields == ["boot_id"]


def test_wrong_type_named():
    err = _bad(lambda d: d["gpus"]["mem_used_bytes"].__setitem__(0, "lots"))
    assert "gpus.mem_used_bytes[0]" in str(err)


def test_nan_named():
    err = _bad(lambda d: d["gpus"]["power_w"].__setitem__(0, "__NaN__"))
    assert "gpus.power_w[0]" in str(err) and "finite" in str(err)


def test_infinity_rejected():
    doc = json.loads(encode(snapshot()))
    text = json.dumps(doc).replace('"util_gpu": [97.0]', '"util_gpu": [Infinity]')
    with pytest.raises(ContractError, match=r"gpus\.util_gpu\[0\]"):
        decode(text)


def test_negative_memory_named():
    err = _bad(lambda d: d["processes"]["used_memory_bytes"].__setitem__(0, -1))
    assert "processes.used_memory_bytes[0]" in str(err)


def test_negative_counter_named():
    err = _bad(lambda d: d["gpus"]["ecc_aggregate_uncorrected"].__setitem__(0, -3))
    assert "gpus.ecc_aggregate_uncorrected[0]" in str(err)


def test_ten_years_in_future_named():
    err = _bad(lambda d: d.__setitem__("ts", NOW + 10 * 365 * 86400))
    assert str(err).startswith("ts:") and "future" in str(err)


def test_future_skew_is_configurable():
    data = encode(snapshot(ts=NOW + 600))
    with pytest.raises(ContractError, match="future"):
        decode(data, now=NOW)                                   # default skew 300 s
    assert decode(data, now=NOW, max_future_skew_s=900).ts == NOW + 600


def test_five_megabyte_record_rejected_before_parsing():
    doc = json.loads(encode(snapshot()))
    doc["processes"]["command"][0] = "x" * (5 << 20)
    data = json.dumps(doc).encode()
    with pytest.raises(ContractError) as ei:
        decode(data)
    assert ei.value.fields == ["record"] and "exceeds" in str(ei.value)
    # Under a larger size limit the field's own bound still names it.
    with pytest.raises(ContractError, match=r"processes\.command\[0\]"):
        decode(data, max_bytes=16 << 20)


def test_unknown_fields_within_a_major_version_are_ignored_and_named():
    """A newer agent than its workers: its records are read, the extra fields named, not fatal."""
    doc = json.loads(encode(snapshot()))
    doc["surprise"] = 1
    doc["gpus"]["hbm_temp_c"] = [41.0]
    rec = decode(json.dumps(doc), NodeSnapshot, now=NOW)
    assert rec.gpus.util_gpu == snapshot().gpus.util_gpu
    assert unknown_fields(rec) == ["surprise", "gpus.hbm_temp_c"]
    assert unknown_fields(snapshot()) == []
    ev = json.loads(encode(ALL_RECORDS[1]))
    ev["catalogue"] = {**(ev["catalogue"] or {"code": 79, "meaning": "m", "action": "a", "severity": "critical"}),
                       "since_driver": "570"}
    assert unknown_fields(decode(json.dumps(ev))) == ["catalogue.since_driver"]


def test_unknown_major_version_rejected_with_what_the_reader_reads():
    doc = json.loads(encode(snapshot()))
    doc["schema"] = "node_snapshot/3"
    for model in (NodeSnapshot, None):
        with pytest.raises(ContractError) as ei:
            decode(json.dumps(doc), model)
        assert str(ei.value) == ("schema: 'node_snapshot/3' is a version this reader does not know (it reads "
                                 "node_snapshot/2): upgrade the reader before the writers")
        assert ei.value.fields == ["schema"]
    doc["schema"] = "task_metric/1"
    with pytest.raises(ContractError, match="'task_metric/1' is not a record this reader takes"):
        decode(json.dumps(doc), NodeSnapshot)


def test_past_skew_rejected_at_live_boundaries_only():
    doc = json.loads(encode(snapshot()))
    doc["ts"] = 86415.0  # a node booted with its clock at 1970
    with pytest.raises(ContractError, match=r"ts: .* s in the past \(allowed 604800 s, limits.max_past_skew\)"):
        decode(json.dumps(doc), NodeSnapshot, now=NOW, max_past_skew_s=7 * 86400)
    assert decode(json.dumps(doc), NodeSnapshot).ts == 86415.0  # a trusted replay
    doc["ts"] = NOW - 6 * 86400
    assert decode(json.dumps(doc), NodeSnapshot, now=NOW, max_past_skew_s=7 * 86400).ts == NOW - 6 * 86400


def test_dead_letter_keeps_small_values_whole_and_bounds_oversized_ones():
    small = dead_letter("gpu.samples", b"{trunc", "bad", key=b"n1", max_bytes=1 << 20)
    assert base64.b64decode(small.value_b64) == b"{trunc" and not small.truncated
    assert small.value_bytes == 6 and small.value_sha256 == hashlib.sha256(b"{trunc").hexdigest()
    big = b"{" + b"x" * (5 << 20)
    letter = dead_letter("gpu.samples", big, "record: too big", key=b"k" * 5000, max_bytes=1 << 20)
    assert letter.truncated and letter.value_bytes == len(big)
    assert base64.b64decode(letter.value_b64) == big[:DEAD_LETTER_PREFIX]
    assert letter.value_sha256 == hashlib.sha256(big).hexdigest()
    assert letter.key_bytes == 5000 and len(base64.b64decode(letter.key_b64)) == 1024
    assert len(encode(letter)) < 100_000


def test_not_json_rejected():
    with pytest.raises(ContractError):
        decode(b"\xff\xfe not json")


def test_topics_prefix_and_keys():
    t = Topics("lab1.")
    assert t.samples == "lab1.gpu.samples" and Topics.dlq(t.samples) == "lab1.gpu.samples.dlq"
    assert [t.for_record(r) for r in ALL_RECORDS[:5]] == [
        t.samples, t.events, t.metrics, t.summaries, t.alerts]
    assert [record_key(r) for r in ALL_RECORDS[:5]] == [
        "node-00", "node-00", "node-00", "llama-pretrain", "fp1"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_never_escape_as_other_errors(blob):
    try:
        decode(blob, now=NOW)
    except ContractError:
        pass


@settings(max_examples=100, deadline=None)
@given(util=st.floats(allow_nan=True, allow_infinity=True), mem=st.integers(min_value=-(2**40), max_value=2**50))
def test_sample_values_validated(util, mem):
    doc = json.loads(encode(snapshot()))
    doc["gpus"]["util_gpu"][0] = util if math.isfinite(util) else None
    doc["gpus"]["mem_used_bytes"][0] = mem
    ok = (not math.isfinite(util) or 0 <= util <= 100) and mem >= 0
    try:
        decode(json.dumps(doc))
        assert ok
    except ContractError:
        assert not ok


def test_snapshot_tables_left_sparse_decode_like_full_ones():
    """A table with only its required columns (a minimal agent) gets every row default."""
    doc = json.loads(encode(snapshot()))
    doc["gpus"] = {"index": [0, 1], "uuid": ["GPU-a", "GPU-b"]}
    doc["processes"] = {"pid": [], "gpu_index": []}
    snap = decode(json.dumps(doc))
    assert snap.gpus.util_gpu == [None, None] and snap.gpus.clock_event_names == [[], []]
    assert snap.gpus.clock_event_names[0] is not snap.gpus.clock_event_names[1]  # one list per row
    assert len(snap.processes) == 0 and snap.processes.command == []


def _metric(node: str, ts: float, task_id: str = "slurm-1", **kw) -> TaskMetric:
    return TaskMetric(node=node, ts=ts, task="llama-pretrain", task_id=task_id, kind=kw.pop("kind", "step"), **kw)


def test_task_metrics_travel_one_batch_per_node_and_tick_and_unpack_to_the_same_records():
    snap_a, snap_b = snapshot(), snapshot().model_copy(update={"node": "node-01"})
    tick = [snap_a, snap_b, _metric("node-00", NOW + 0.25, step=1), _metric("node-01", NOW + 0.25),
            _metric("node-00", NOW + 0.5, "slurm-2", kind="throughput", throughput=9.0)]
    later = [snap_a.model_copy(update={"ts": NOW + 1, "seq": 8}), _metric("node-00", NOW + 1.25, step=2)]
    wire = list(batch_task_metrics(tick + later))
    assert [type(r).__name__ for r in wire] == ["NodeSnapshot", "NodeSnapshot", "TaskMetrics", "NodeSnapshot",
                                                 "TaskMetrics", "TaskMetrics"]  # node-00's before its next record
    first = wire[2]
    assert (first.node, first.ts, [m.task_id for m in first.metrics]) == ("node-00", NOW + 0.25, ["slurm-1", "slurm-2"])
    data = json.loads(encode(first))
    assert data["schema"] == "task_metrics/1" and "node" not in data["metrics"][0] and "ts" not in data
    back = list(unbatch(decode(encode(r)) for r in wire))
    for node in ("node-00", "node-01"):  # each node's own order, record for record
        assert [encode(r) for r in back if r.node == node] == [encode(r) for r in tick + later if r.node == node]
    assert back[2] == tick[2] and back[2].simulated is False
    sim = [_metric("n", NOW + i, simulated=True) for i in range(1200)]  # a node with no other records
    batches = list(batch_task_metrics(sim))
    assert [len(b.metrics) for b in batches] == [512, 512, 176] and all(b.simulated for b in batches)
    assert list(unbatch(batches)) == sim


def test_a_single_task_metric_is_no_wire_record():
    with pytest.raises(ContractError, match="'task_metric/1' is not a record this reader takes"):
        decode(encode(_metric("node-00", NOW)))
    with pytest.raises(ContractError, match="metrics: List should have at least 1 item"):
        decode(b'{"schema":"task_metrics/1","node":"node-00","metrics":[]}')


def test_a_batch_with_bad_items_keeps_the_good_ones_and_each_bad_one_alone():
    batch = TaskMetrics.of([_metric("node-00", NOW + i, f"slurm-{i}") for i in range(4)])
    doc = json.loads(encode(batch))
    doc["metrics"][1]["step_time_s"] = -1.0
    doc["metrics"][3]["ts"] = NOW + 10_000  # in the future
    data = json.dumps(doc).encode()
    with pytest.raises(ContractError, match=r"metrics\[1\]\.step_time_s: .*; metrics\[3\]\.ts: "):
        decode(data, TaskMetrics, now=NOW)
    got = salvage_task_metrics(data, now=NOW)
    assert [m.task_id for m in got.batch.metrics] == ["slurm-0", "slurm-2"] and got.batch.node == "node-00"
    (one, why1), (three, why3) = got.bad
    assert why1.startswith("metrics[1].step_time_s: ") and why3.startswith("metrics[3].ts: ") and "future" in why3
    alone = json.loads(one)  # a letter holds the item as sent, in a batch of its own
    assert {**alone, "metrics": None} == {**doc, "metrics": None} and alone["metrics"] == [doc["metrics"][1]]
    for envelope in ({**doc, "node": None}, {**doc, "metrics": "x"}, {**doc, "schema": "task_metrics/2"},
                     {**doc, "metrics": [doc["metrics"][1]]}):  # the batch at fault, or no good item: whole
        assert salvage_task_metrics(json.dumps(envelope), now=NOW) is None
    assert salvage_task_metrics(b"not json") is None


def test_unknown_fields_of_batch_items_are_counted_once_each():
    doc = json.loads(encode(TaskMetrics.of([_metric("node-00", NOW), _metric("node-00", NOW + 1)])))
    for m in doc["metrics"]:
        m["mfu"] = 0.4
    doc["metrics"][0]["tflops"] = 1.0
    assert unknown_fields(decode(json.dumps(doc))) == ["metrics[].mfu", "metrics[].tflops"]
