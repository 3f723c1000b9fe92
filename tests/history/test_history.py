"""Portable history: export → import keeps every record and the engine state, verified by checksum."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import tarfile

import pytest

from gpuwarden.contract import (
    AlertState, AlertTransition, EventKind, GpuEvent, Silence, Matcher, Tier, Topics, batch_task_metrics, decode,
    encode, dead_letter, record_key,
)
from gpuwarden.schedpolls import KEYFRAME_S, expand
from gpuwarden.history.portable import HistoryError, HistoryFile, export_history, import_to_kafka, import_to_spool
from gpuwarden.spool import Spool
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.history.sources import read_file, read_spool
from tests.history.builders import config, gw
from tests.history.test_accounting import T0, scenario
from tests.kafka_support import consume_all, topic_config, unique_topic

ENGINE_STATE = {"class:llm": b'{"util_gpu":{"median":71.5}}', "node:n1": b"\x00\x01binary"}


def contract_records() -> list:
    """As they are on the wire (the spool holds them so): the task metrics in batches."""
    return list(batch_task_metrics([
        *scenario(),
        GpuEvent(node="n1", ts=T0 + 100, seq=1, boot_id="b", kind=EventKind.XID, source="kmsg",
                 gpu_index=1, code=79, message="GPU has fallen off the bus"),
        AlertTransition(fingerprint="fp1", rule="xid.fatal", tier=Tier.CRITICAL, state=AlertState.FIRING,
                        labels={"node": "n1", "gpu": "1"}, started_at=T0 + 100, ts=T0 + 100,
                        summary="XID 79"),
        Silence(id="s1", matchers=[Matcher(label="node", value="n2")], starts_at=T0, ends_at=T0 + 60,
                created_by="ops"),
    ]))


def fill(spool: Spool, prefix: str = "") -> None:
    topics = Topics(prefix)
    recs = contract_records()
    spool.append_many((topics.for_record(r), None, getattr(r, "ts", T0), encode(r)) for r in recs)
    # Not history: a dead letter and a notifier outbox row stay behind.
    dl = dead_letter(topics.samples, b"{not json", "bad", received_at=T0)
    spool.append(Topics.dlq(topics.samples), encode(dl), ts=T0)
    spool.append("notify.outbox", b"opaque", ts=T0)
    spool.kv_put_many("engine", ENGINE_STATE.items())
    spool.kv_put("control", "silence:s1", encode(next(r for r in recs if isinstance(r, Silence))))


def rows(spool: Spool) -> list[tuple]:
    return sorted((r.topic, r.ts, r.value) for r in spool.read() if not r.topic.endswith(".dlq")
                  and r.topic != "notify.outbox")


def sha(values) -> str:
    h = hashlib.sha256()
    for v in values:
        h.update(v + b"\n")
    return h.hexdigest()


def test_round_trip_through_the_cli(tmp_path):
    src_db, dst_db = tmp_path / "a.db", tmp_path / "b.db"
    with Spool(src_db) as s:
        fill(s, "siteA.")
        before = rows(s)
    out = tmp_path / "hist.tar"
    r = gw("export", "--config", config(tmp_path / "a", "siteA.", spool=src_db),
                "--since", str(T0 - 3600), "--until", str(T0 + 86400), "--out", str(out))
    assert r.returncode == 0, r.stderr
    with HistoryFile(out) as hf:
        m = hf.manifest
        assert m["records"] == len(contract_records())
        assert m["counts"] == {"alerts": 1, "control": 1, "gpu.events": 1, "gpu.samples": 12,
                               "task.metrics": 2}  # n1's two metrics in one batch, n2's one
        assert m["nodes"] == ["n1", "n2"] and m["site"] == "lab-a"
        assert m["first_ts"] == T0 - 600 and m["last_ts"] == T0 + 3600
        assert m["schemas"]["node_snapshot/2"] == 12
        assert m["records_sha256"] == sha(encode(x) for x in contract_records())
    # Another site with another prefix: records land on its topics, unchanged.
    r = gw("import", "--config", config(tmp_path / "b", "siteB.", spool=dst_db), str(out))
    assert r.returncode == 0, r.stderr
    assert "older than spool.max_age" in r.stderr  # 2023 records into a 7-day spool: said, not hidden
    with Spool(dst_db) as d:
        after = rows(d)
        assert [(t.replace("siteA.", "siteB."), ts, v) for t, ts, v in before] == after
        assert sha(v for _, _, v in after) == sha(v for _, _, v in before)
        assert dict(d.kv_items("engine")) == ENGINE_STATE
        assert decode(d.kv_get("control", "silence:s1")).id == "s1"


def test_time_range_limits_the_export(tmp_path):
    with Spool(tmp_path / "a.db") as s:
        fill(s)
        export_history(s, tmp_path / "h.tar", since=T0, until=T0 + 1000)
    with HistoryFile(tmp_path / "h.tar") as hf:
        hf.verify()
        ts = [r.ts for r in hf.records() if hasattr(r, "ts")]
        assert ts and all(T0 <= t < T0 + 1000 for t in ts)
        assert hf.manifest["records"] == len(list(hf.records()))


def tamper(src, dst) -> None:
    """Rewrite one record (bob → mallory) but keep the manifest: the checksum must catch it."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w") as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read()
            if m.name == "records.jsonl.gz":
                data = gzip.compress(gzip.decompress(data).replace(b'"bob"', b'"mallory"', 1))
                m.size = len(data)
            tout.addfile(m, io.BytesIO(data))


def test_damaged_file_is_refused_and_nothing_is_written(tmp_path):
    with Spool(tmp_path / "a.db") as s:
        fill(s)
        export_history(s, tmp_path / "h.tar")
    tamper(tmp_path / "h.tar", tmp_path / "bad.tar")
    dst = tmp_path / "b.db"
    r = gw("import", "--config", config(tmp_path / "b", spool=dst), str(tmp_path / "bad.tar"))
    assert r.returncode == 1
    assert "checksum mismatch" in r.stderr
    with Spool(dst) as d:
        assert list(d.read()) == [] and d.kv_items("engine") == []
    with pytest.raises(HistoryError, match="not a gpuwarden history file"):
        HistoryFile(tmp_path / "b" / "gpuwarden.yaml")


@pytest.mark.kafka
def test_import_into_kafka(tmp_path, kafka_bootstrap):
    prefix = unique_topic("hist") + "."
    with Spool(tmp_path / "a.db") as s:
        fill(s)
        export_history(s, tmp_path / "h.tar")
    with HistoryFile(tmp_path / "h.tar") as hf:
        hf.verify()
        n = asyncio.run(import_to_kafka(hf, {"bootstrap_servers": kafka_bootstrap}, prefix))
    assert n == len(contract_records())
    topics = Topics(prefix)
    got = asyncio.run(consume_all(kafka_bootstrap, topics.samples, expected=12))
    assert sorted(m.value for m in got) == sorted(encode(r) for r in scenario() if r.schema_ == "node_snapshot/2")
    assert {m.key for m in got} == {b"n1", b"n2"}
    alerts = asyncio.run(consume_all(kafka_bootstrap, topics.alerts, expected=1))
    assert json.loads(alerts[0].value)["fingerprint"] == "fp1" and alerts[0].key == b"fp1"
    # its silences and acks went to a control topic the import created as the notifier would
    # (compacted), not one the broker auto-created on the first produce (which on a fresh broker
    # could stay without metadata for a minute)
    assert asyncio.run(topic_config(kafka_bootstrap, topics.control))["cleanup.policy"] == "compact"


def test_baselines_survive_the_move(recorded, tmp_path):
    """A site's engine state (real baselines) exported and imported: the new site judges the same."""
    cfg = EngineConfig(observation_period=1200, baseline_min_samples=10, baseline_refresh=300)
    records = list(read_file(recorded["file"]))
    half = len(records) // 2
    old = Engine(config=cfg)
    old.process_many(records[:half])
    with Spool(tmp_path / "a.db") as s:
        topics = Topics()
        wire = list(batch_task_metrics(records[:half]))
        s.append_many((topics.for_record(r), record_key(r), r.ts, encode(r)) for r in wire)
        s.kv_put("engine", "state", old.dump_all())
        export_history(s, tmp_path / "h.tar")
    with HistoryFile(tmp_path / "h.tar") as hf, Spool(tmp_path / "b.db") as dst:
        hf.verify()
        import_to_spool(hf, dst)
        moved = Engine(config=cfg)
        moved.load_all(dst.kv_get("engine", "state"))
        assert [encode(r) for r in expand(decode(x.value) for x in dst.read())] == [encode(r) for r in wire]
    classes = old.classes.classes()
    bands = {c: old.classes.baseline(c) for c in classes}
    assert any(b is not None for per in bands.values() for b in per.values()), "some class has a baseline"
    assert {c: moved.classes.baseline(c) for c in moved.classes.classes()} == bands
    assert moved.dump_all() == old.dump_all()
    rest = records[half:]
    assert moved.process_many(rest) + moved.flush() == old.process_many(rest) + old.flush()


def test_a_compressed_spool_round_trips_exactly(recorded, tmp_path):
    """The live run's spool holds its history in compressed blocks; every record comes back as the
    run wrote it (its --record file, byte for byte), through export and import, and replays to
    the live run's transitions."""
    import sqlite3

    from gpuwarden.history.sources import input_topics

    src = recorded["tmp"] / "spool" / "spool.db"
    with sqlite3.connect(src) as db:
        assert db.execute("SELECT COUNT(*) FROM blocks").fetchone()[0] > 10
    written = recorded["file"].read_bytes().splitlines()
    inputs = set(input_topics())

    def held(spool: Spool) -> list[bytes]:  # scheduler polls whole again
        return [encode(r) for r in expand(decode(x.value) for x in spool.read() if x.topic in inputs)]

    with Spool(src) as s:
        assert held(s) == written
        export_history(s, tmp_path / "a.tar")
    with HistoryFile(tmp_path / "a.tar") as hf, Spool(tmp_path / "b.db") as b:
        hf.verify()
        import_to_spool(hf, b)
        assert held(b) == written
        export_history(b, tmp_path / "b.tar")
    with HistoryFile(tmp_path / "a.tar") as a, HistoryFile(tmp_path / "b.tar") as b:
        assert a.manifest["records_sha256"] == b.manifest["records_sha256"]
        assert list(a.lines()) == list(b.lines())
        assert [x.rstrip(b"\n") for x in a.lines() if Topics().for_record(decode(x)) in inputs] == written
    r = gw("replay", "--config", recorded["cfg"], "--spool", str(tmp_path / "b.db"), "--json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == recorded["live"]


def test_the_spool_stores_a_scheduler_job_only_when_it_changed(recorded):
    """The live run polls its simulated Slurm every 30 s and sends every job each time (its
    --record file); the spool stores a job's record only when something but its time changed
    since the poll before, or in a whole poll (one per KEYFRAME_S), and replays the same."""
    live: dict[float, dict[str, dict]] = {}
    for line in recorded["file"].read_bytes().splitlines():
        r = json.loads(line)
        if r["schema"] == "scheduler_job/1":
            live.setdefault(r.pop("ts"), {})[r["job_id"]] = r
    polls = sorted(live)
    changed = {t: {j for j, r in live[t].items() if i == 0 or live[polls[i - 1]].get(j) != r}
               for i, t in enumerate(polls)}
    stored: dict[float, set[str]] = {}
    with Spool(recorded["tmp"] / "spool" / "spool.db") as s:
        for x in s.read(Topics().jobs):
            r = json.loads(x.value)
            if r["schema"] == "scheduler_job/1":
                stored.setdefault(r["ts"], set()).add(r["job_id"])
    whole = [t for t in polls if stored.get(t, set()) == set(live[t]) and changed[t] != set(live[t])]
    assert len(whole) <= 1 + (polls[-1] - polls[0]) / KEYFRAME_S, "a whole poll at most every KEYFRAME_S"
    for t in polls:
        assert stored.get(t, set()) in (changed[t], set(live[t])), t
    n_live, n_stored = sum(map(len, live.values())), sum(map(len, stored.values()))
    assert n_stored <= n_live / 5, f"{n_stored} of {n_live} scheduler job records stored"


def test_a_read_from_the_middle_of_the_spool_has_whole_polls(recorded):
    """A replay or export from a time inside the run: its first polls repeat jobs stored before
    that time, which the read finds (the file of the live run says what each poll held)."""
    from tests.history.conftest import START

    since, until = START + 1815.0, START + 2700.0
    with Spool(recorded["tmp"] / "spool" / "spool.db") as s:
        spooled = [encode(r) for r in read_spool(s, since, until)]
    filed = [encode(r) for r in read_file(recorded["file"], since, until)]
    assert sum(b'"scheduler_job/1"' in x for x in filed) > 100
    assert spooled == filed


def test_the_scheduler_report_of_the_spool_is_that_of_every_poll(recorded):
    """``report scheduler`` and the console's /scheduler read the spool's on-change records: the
    same report as from every poll the live run sent (its --record file)."""
    from gpuwarden.contract import SchedulerJob
    from gpuwarden.history.queues import BY, JobIndex, from_spool
    from tests.history.conftest import START

    every = JobIndex()
    for r in read_file(recorded["file"]):
        if isinstance(r, SchedulerJob):
            every.add(r)
    with Spool(recorded["tmp"] / "spool" / "spool.db") as s:
        for by in BY:
            for since, until in ((START, START + 3600), (START + 1200, START + 2400)):
                assert from_spool(s, by=by, since=since, until=until) == every.report(by=by, since=since, until=until)
