"""The spool: ordered, bounded, crash-safe, and state that survives a restart."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys

import pytest

from gpuwarden import spool
from gpuwarden.spool import Spool, SpoolError


def test_append_pending_publish_in_order(tmp_path):
    with Spool(tmp_path / "s.db") as s:
        ids = s.append_many([("t", f"k{i}", float(i), f"v{i}".encode()) for i in range(10)])
        assert ids == sorted(ids)
        assert [r.value for r in s.pending("t", limit=3)] == [b"v0", b"v1", b"v2"]
        s.mark_published(ids[:5])
        assert s.pending_count("t") == 5
        assert [r.key for r in s.pending()] == [f"k{i}" for i in range(5, 10)]


def test_read_by_topic_and_time_range(tmp_path):
    with Spool(tmp_path / "s.db") as s:
        for i in range(10):
            s.append("a" if i % 2 else "b", str(i).encode(), ts=100.0 + i)
        assert [r.value for r in s.read("a", since=103, until=108)] == [b"3", b"5", b"7"]
        assert s.topics() == {"a": 5, "b": 5}


def test_eviction_oldest_first_by_size_and_age(tmp_path):
    with Spool(tmp_path / "s.db", max_bytes=10_000, max_age_s=1000) as s:
        s.append_many([("t", None, 1000.0 + i, b"x" * 1000) for i in range(20)])
        assert s.over_limit()
        dropped = s.evict(now=1010.0)
        left = list(s.read())
        assert dropped == 10 and len(left) == 10
        assert left[0].ts == 1010.0                  # the oldest went first
        assert s.evict(now=1000.0 + 1015) == 5       # age: ts < now - 1000
        assert s.counter("dropped") == 15


def test_kv_state_survives_reopen(tmp_path):
    p = tmp_path / "s.db"
    with Spool(p) as s:
        s.kv_put("baseline", "llama", b"state-1")
        s.kv_put("baseline", "llama", b"state-2")
        s.kv_put_many("ack", [("fp1", b"a"), ("fp2", b"b")])
    with Spool(p) as s:
        assert s.kv_get("baseline", "llama") == b"state-2"
        assert s.kv_items("ack") == [("fp1", b"a"), ("fp2", b"b")]
        s.kv_delete("ack", "fp1")
        assert s.kv_get("ack", "fp1") is None


def test_big_state_is_stored_compressed(tmp_path):
    """The engine's saved state (MBs of JSON, rewritten every 30 s) takes a fraction on disk."""
    p = tmp_path / "s.db"
    state = b'{"classes":{' + b",".join(b'"c%d":{"util":[%d,71.5]}' % (i, i % 9) for i in range(20000)) + b"}}"
    with Spool(p) as s:
        s.kv_put("engine", "sim-state", state)
        with sqlite3.connect(p) as db:
            assert db.execute("SELECT length(value) FROM kv").fetchone()[0] < len(state) / 5
        assert s.kv_get("engine", "sim-state") == state and s.kv_items("engine") == [("sim-state", state)]
        s.kv_put("engine", "sim-state", b"small")  # replaced by a small one: stored as it is
        assert s.kv_get("engine", "sim-state") == b"small"
    with Spool(p) as s:
        assert s.kv_get("engine", "sim-state") == b"small"


def test_survives_a_killed_writer(tmp_path):
    """A process killed right after appending loses nothing it committed."""
    p = tmp_path / "s.db"
    code = (
        "import os, sys; from gpuwarden.spool import Spool\n"
        f"s = Spool({str(p)!r})\n"
        "for i in range(200): s.append('t', str(i).encode(), ts=float(i))\n"
        "os.kill(os.getpid(), 9)\n"
    )
    r = subprocess.run([sys.executable, "-c", code])
    assert r.returncode == -9
    with Spool(p) as s:
        assert [int(r.value) for r in s.read("t")] == list(range(200))


# ---------------------------------------------------------------------- blocks (compressed history)

def _history(n: int = 3000) -> list[tuple[str, str | None, float, bytes]]:
    """Rows of three topics, as a fleet writes them: awkward keys and times, arbitrary bytes,
    one value bigger than a block, values that repeat (the case blocks are for)."""
    rng = random.Random(7)
    rows = []
    for i in range(n):
        topic = ("gpu.samples", "scheduler.jobs", "alerts")[i % 3]
        key = None if i % 7 == 0 else ("nœud-é" if i % 5 == 0 else f"node-{i % 4}")
        ts = 1_800_000_000.0 + i * 0.1 + (0.30000000000000004 if i % 11 == 0 else 0.0)
        value = (b'{"util":[%d,%d],"name":"H200"}' % (i % 100, rng.randrange(1000))) * rng.randrange(1, 60)
        if i % 97 == 0:
            value = bytes(rng.randrange(256) for _ in range(2000))  # binary, NULs and all
        rows.append((topic, key, ts, value))
    rows.append(("gpu.samples", "big", 1_800_000_400.0, os.urandom(spool.BLOCK_BYTES + 10)))
    return rows


def _blocks(path) -> int:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT COUNT(*) FROM blocks").fetchone()[0]


def _seen(records) -> list[tuple]:
    return [(r.id, r.topic, r.key, r.ts, r.value) for r in records]


def test_history_in_blocks_reads_back_byte_for_byte(tmp_path):
    rows = _history()
    p = tmp_path / "s.db"
    with Spool(p) as s:
        ids = []
        for i in range(0, len(rows), 50):  # in ticks, as the standalone run appends
            ids += s.append_many(rows[i:i + 50], published=True)
        want = [(i, *r) for i, r in zip(ids, rows)]
        assert _blocks(p) > 3  # most of it is compressed...
        assert _seen(s.read()) == want  # ...and every id, topic, key, time and value comes back
        assert s.topics() == {t: sum(1 for r in rows if r[0] == t) for t in ("gpu.samples", "scheduler.jobs", "alerts")}
        since, until = rows[1000][2], rows[2000][2]
        assert _seen(s.read("scheduler.jobs", since=since, until=until)) == [
            w for w in want if w[1] == "scheduler.jobs" and since <= w[3] < until]
        assert _seen(s.read(since=since)) == [w for w in want if w[3] >= since]
        assert _seen(s.read(after_id=ids[1500])) == want[1501:]
        assert s.pending_count() == 0
        stored = s._payload_bytes()
    assert stored < sum(len(r[3]) for r in rows) / 4
    with Spool(p) as s:
        assert _seen(s.read()) == want


def test_pending_records_stay_rows_until_published(tmp_path):
    """The outbox: what waits for Kafka is never sealed; once published it is, and reads the same."""
    rows = [("gpu.samples", "n1", float(i), b"x%05d" % i * 200) for i in range(1000)]
    p = tmp_path / "s.db"
    with Spool(p) as s:
        ids = s.append_many(rows)
        assert _blocks(p) == 0 and s.pending_count() == 1000
        s.mark_published(ids[:600])
        assert _blocks(p) >= 1
        assert [r.id for r in s.pending(limit=2000)] == ids[600:]
        assert _seen(s.read()) == [(i, *r) for i, r in zip(ids, rows)]
        assert [r.published for r in s.read()] == [True] * 600 + [False] * 400


def test_eviction_counts_compressed_bytes(tmp_path):
    rows = _history()
    with Spool(tmp_path / "s.db", max_bytes=1 << 40) as s:
        ids = s.append_many(rows, published=True)
        total = s._payload_bytes()
        s.max_bytes = total // 2
        dropped = s.evict(now=1_800_000_000.0)
        left = _seen(s.read())
        assert s._payload_bytes() <= s.max_bytes and dropped == s.counter("dropped") > 0
        assert len(left) == len(rows) - dropped
        want = [(i, *r) for i, r in zip(ids, rows)]
        for topic in {r[0] for r in rows}:  # each topic's oldest blocks went, the rest is intact
            kept = [x for x in left if x[1] == topic]
            ours = [w for w in want if w[1] == topic]
            assert kept == ours[len(ours) - len(kept):]


def test_age_eviction_cuts_through_a_block(tmp_path):
    rows = _history()
    with Spool(tmp_path / "s.db", max_age_s=100.0) as s:
        ids = s.append_many(rows, published=True)
        cutoff = rows[1234][2]
        dropped = s.evict(now=cutoff + 100.0)
        want = [(i, *r) for i, r in zip(ids, rows) if r[2] >= cutoff]
        assert _seen(s.read()) == want and dropped == len(rows) - len(want)


_PREVIOUS_SCHEMA = """
CREATE TABLE records (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT NOT NULL, key TEXT, ts REAL NOT NULL,
                      value BLOB NOT NULL, published INTEGER NOT NULL DEFAULT 0);
CREATE INDEX records_topic_ts ON records(topic, ts);
CREATE INDEX records_pending ON records(published, topic, id);
CREATE TABLE kv (ns TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (ns, key));
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def test_a_spool_of_the_previous_format_opens_and_reads(tmp_path):
    """Rows only (before blocks): read as they are, new history goes into blocks beside them."""
    p = tmp_path / "old.db"
    rows = _history(600)
    with sqlite3.connect(p) as db:
        db.executescript(_PREVIOUS_SCHEMA)
        db.executemany("INSERT INTO records(topic, key, ts, value) VALUES (?,?,?,?)", rows)
        db.execute("INSERT INTO kv VALUES ('engine', 'state', x'00ff')")
    with Spool(p) as s:
        assert [(r.topic, r.key, r.ts, r.value) for r in s.read()] == rows
        assert s.kv_get("engine", "state") == b"\x00\xff" and s.pending_count() == len(rows)
        s.kv_put("engine", "big", bytes(200_000))
        assert s.kv_get("engine", "big") == bytes(200_000)
        more = _history(3000)
        s.append_many(more, published=True)
        assert [(r.topic, r.key, r.ts, r.value) for r in s.read()] == rows + more
    assert _blocks(p) > 0


def test_a_spool_of_a_newer_format_is_refused_clearly(tmp_path):
    p = tmp_path / "new.db"
    with Spool(p):
        pass
    with sqlite3.connect(p) as db:
        db.execute(f"PRAGMA user_version={spool.FORMAT + 1}")
    with pytest.raises(SpoolError, match="written by a newer gpuwarden"):
        Spool(p)


def test_time_range_reads_find_blocks_through_an_index(tmp_path):
    """A read by time (with or without a topic) looks blocks up in an index, never walks the table."""
    p = tmp_path / "s.db"
    rows = _history()
    with Spool(p) as s:
        s.append_many(rows, published=True)
        seen: list[str] = []
        s._db.set_trace_callback(seen.append)
        list(s.read("alerts", since=rows[1000][2], until=rows[2000][2]))
        list(s.read(since=rows[2500][2]))
        s._db.set_trace_callback(None)
    lookups = [q for q in seen if "FROM blocks WHERE" in q and "first_id=" not in q]
    assert len(lookups) == 2
    with sqlite3.connect(p) as db:
        for sql in lookups:
            plan = " ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + sql))
            assert "USING COVERING INDEX" in plan and "ts_max>" in plan, (sql, plan)
