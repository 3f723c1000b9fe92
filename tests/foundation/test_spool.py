"""The spool: ordered, bounded, crash-safe, and state that survives a restart."""

from __future__ import annotations

import subprocess
import sys

from gpuwarden.spool import Spool


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
