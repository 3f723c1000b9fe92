"""The spool's database file cannot grow: a clear error, oldest-first eviction, nothing corrupted.

The full disk is emulated with SQLite's ``max_page_count`` (the database file
cannot grow past 1 MiB; SQLite answers SQLITE_FULL exactly as on a full disk).
A real full tmpfs also fills the WAL, where even the eviction's DELETE cannot be
logged; docs/reliability.md says what to configure for that (spool.max_bytes
below the free space).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwarden.spool import Spool, SpoolError

RECORD = 2000  # bytes per record
PAGES = 256  # 1 MiB at 4 KiB pages


def open_spool(path: Path) -> Spool:
    spool = Spool(path, max_bytes=1 << 40)  # the size limit is not what stops it
    spool._db.execute(f"PRAGMA max_page_count={PAGES}")
    return spool


def value(i: int) -> bytes:
    return (b"%08d" % i) * (RECORD // 8)


def test_disk_full_evicts_oldest_first_and_keeps_the_file_sound(tmp_path, reliability_report):
    spool = open_spool(tmp_path / "spool.db")
    appended = 0
    for i in range(2000):  # 4 MB into a 1 MiB disk
        spool.append("gpu.samples", value(i), key="node-a", ts=float(i))
        appended += 1
    dropped = spool.counter("dropped")
    kept = list(spool.read())
    ids = [int(r.value[:8]) for r in kept]
    assert dropped > 0 and len(kept) + dropped == appended, "every record is either kept or counted as dropped"
    assert ids == list(range(appended - len(kept), appended)), "the newest records are kept, in order"
    assert spool._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    spool.close()
    reopened = Spool(tmp_path / "spool.db", max_bytes=1 << 40)
    assert [int(r.value[:8]) for r in reopened.read()] == ids
    reopened.close()
    reliability_report("spool disk full (max_page_count)", lost=0,
                       detail=f"{appended} appended, {dropped} oldest evicted and counted, {len(kept)} kept, "
                              "integrity_check ok")


def test_a_record_larger_than_the_disk_is_a_clear_error(tmp_path):
    spool = open_spool(tmp_path / "spool.db")
    spool.append("gpu.samples", value(1), ts=1.0)
    with pytest.raises(SpoolError) as err:
        spool.append("gpu.samples", b"x" * (4 << 20), ts=2.0)
    assert err.value.disk_full and "disk full" in str(err.value) and "spool.db" in str(err.value)
    assert spool._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    spool.close()
