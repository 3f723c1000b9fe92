"""Local spool: an ordered, crash-safe record log plus a small key/value store.

Why SQLite in WAL mode rather than segment files: one portable file, atomic
batched appends, readers that never block the writer, ordered reads by rowid,
indexed time-range reads for replay and export, and the standard library only.
``synchronous=NORMAL`` survives a process crash (not a power cut of the last
few transactions), which is the failure the agent and notifier actually meet.

The record log serves three callers: the agent's outbox (append first, mark
published when Kafka acknowledges), the standalone pipeline's durable history
(replayable like a topic), and the notifier's undelivered queue. The key/value
store holds state that must outlive a restart in standalone mode: baselines,
silences, acknowledgements, delivery log cursors.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    key TEXT,
    ts REAL NOT NULL,
    value BLOB NOT NULL,
    published INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS records_topic_ts ON records(topic, ts);
CREATE INDEX IF NOT EXISTS records_pending ON records(published, topic, id);
CREATE TABLE IF NOT EXISTS kv (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (ns, key)
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


class SpoolError(RuntimeError):
    """The spool cannot be written (disk full, unreadable file); the message says which."""

    disk_full = False


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    id: int
    topic: str
    key: str | None
    ts: float
    value: bytes
    published: bool


class Spool:
    """A bounded record log (size and age) with oldest-first eviction.

    Thread-safe: one connection guarded by a lock, since the agent's event
    thread and its publisher may both append.
    """

    def __init__(self, path: str | os.PathLike[str], max_bytes: int = 1 << 30,
                 max_age_s: float = 7 * 86400) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as e:
            raise SpoolError(f"spool {self.path}: cannot open ({e})") from None
        self._bytes_estimate = self._payload_bytes()

    # ------------------------------------------------------------------ records

    def append(self, topic: str, value: bytes, *, key: str | None = None, ts: float) -> int:
        return self.append_many([(topic, key, ts, value)])[-1]

    def append_many(self, rows: Iterable[tuple[str, str | None, float, bytes]]) -> list[int]:
        """Append records in one transaction; returns their ids, in order.

        On a full disk the oldest records make room (a tenth of the payload, at
        least twice the batch; counted in ``dropped``) and the append is tried
        once more; if that fails too the :class:`SpoolError` says the disk is full.
        """
        rows = list(rows)
        try:
            return self._append_many(rows)
        except SpoolError as e:
            if not e.disk_full:
                raise
            need = max(2 * sum(len(r[3]) for r in rows), self._bytes_estimate // 10)
            with self._lock, self._write("evict on full disk"):
                dropped = self._drop_oldest_locked(need)
            if not dropped:
                raise
            return self._append_many(rows)

    def _append_many(self, rows: list[tuple[str, str | None, float, bytes]]) -> list[int]:
        ids: list[int] = []
        with self._lock, self._write("append"):
            for topic, key, ts, value in rows:
                cur = self._db.execute(
                    "INSERT INTO records(topic, key, ts, value) VALUES (?,?,?,?)",
                    (topic, key, ts, value),
                )
                ids.append(int(cur.lastrowid))
            self._bytes_estimate += sum(len(r[3]) for r in rows)
        return ids

    def pending(self, topic: str | Collection[str] | None = None, limit: int = 1000) -> list[SpoolRecord]:
        """Unpublished records of ``topic`` (one name, or any of several; None: every topic), oldest first."""
        where, args = _topics(topic)
        q = f"SELECT id, topic, key, ts, value, published FROM records WHERE published=0{where} ORDER BY id LIMIT ?"
        with self._lock:
            return [self._row(r) for r in self._db.execute(q, (*args, limit))]

    def pending_count(self, topic: str | Collection[str] | None = None) -> int:
        where, args = _topics(topic)
        with self._lock:
            return int(self._db.execute(f"SELECT COUNT(*) FROM records WHERE published=0{where}", args).fetchone()[0])

    def mark_published(self, ids: Iterable[int]) -> None:
        ids = list(ids)
        if not ids:
            return
        with self._lock, self._write("mark published"):
            self._db.executemany("UPDATE records SET published=1 WHERE id=?", [(i,) for i in ids])

    def read(self, topic: str | None = None, since: float | None = None,
             until: float | None = None, after_id: int = 0) -> Iterator[SpoolRecord]:
        """Records in append order, optionally by topic and event-time range [since, until)."""
        q = "SELECT id, topic, key, ts, value, published FROM records WHERE id>?"
        args: list = [after_id]
        if topic is not None:
            q += " AND topic=?"
            args.append(topic)
        if since is not None:
            q += " AND ts>=?"
            args.append(since)
        if until is not None:
            q += " AND ts<?"
            args.append(until)
        q += " ORDER BY id"
        with self._lock:
            rows = self._db.execute(q, args).fetchall()
        for r in rows:
            yield self._row(r)

    def last_id(self) -> int:
        """The id of the newest record ever appended (0 for none; AUTOINCREMENT's counter, so eviction
        does not lower it): a reader that follows the spool with ``read(after_id=...)`` knows from one
        lookup that nothing was appended since it last read (the web console)."""
        with self._lock:
            row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name='records'").fetchone()
        return int(row[0]) if row else 0

    def topics(self) -> dict[str, int]:
        with self._lock:
            return dict(self._db.execute("SELECT topic, COUNT(*) FROM records GROUP BY topic"))

    def evict(self, now: float) -> int:
        """Drop records past the age limit, then oldest first until under the size limit.

        Returns how many were dropped; the total is kept in the ``dropped`` counter
        so the agent can report it as an event.
        """
        dropped = 0
        with self._lock, self._write("evict"):
            cur = self._db.execute("DELETE FROM records WHERE ts < ?", (now - self.max_age_s,))
            dropped += cur.rowcount
            if dropped:
                self._count_dropped_locked(dropped)
            if self._payload_bytes_locked() > self.max_bytes:
                dropped += self._drop_oldest_locked(self._payload_bytes_locked() - self.max_bytes)
            self._bytes_estimate = self._payload_bytes_locked()
        return dropped

    def _drop_oldest_locked(self, excess: int) -> int:
        """Delete the oldest records whose payload covers ``excess`` bytes; count them as dropped."""
        acc, cut = 0, None
        for rid, size in self._db.execute("SELECT id, length(value) FROM records ORDER BY id"):
            acc += size
            cut = rid
            if acc >= excess:
                break
        if cut is None:
            return 0
        dropped = self._db.execute("DELETE FROM records WHERE id <= ?", (cut,)).rowcount
        self._count_dropped_locked(dropped)
        self._bytes_estimate = max(0, self._bytes_estimate - acc)
        return dropped

    def _count_dropped_locked(self, n: int) -> None:
        self._db.execute(
            "INSERT INTO counters(name, value) VALUES('dropped', ?) "
            "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
            (n,),
        )

    def over_limit(self) -> bool:
        return self._bytes_estimate > self.max_bytes

    def counter(self, name: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT value FROM counters WHERE name=?", (name,)).fetchone()
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ key/value

    def kv_put(self, ns: str, key: str, value: bytes) -> None:
        with self._lock, self._write("kv put"):
            self._db.execute(
                "INSERT INTO kv(ns, key, value) VALUES (?,?,?) "
                "ON CONFLICT(ns, key) DO UPDATE SET value=excluded.value",
                (ns, key, value),
            )

    def kv_put_many(self, ns: str, items: Iterable[tuple[str, bytes]]) -> None:
        with self._lock, self._write("kv put"):
            self._db.executemany(
                "INSERT INTO kv(ns, key, value) VALUES (?,?,?) "
                "ON CONFLICT(ns, key) DO UPDATE SET value=excluded.value",
                [(ns, k, v) for k, v in items],
            )

    def kv_get(self, ns: str, key: str) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE ns=? AND key=?", (ns, key)).fetchone()
        return None if row is None else bytes(row[0])

    def kv_items(self, ns: str) -> list[tuple[str, bytes]]:
        with self._lock:
            return [(k, bytes(v)) for k, v in self._db.execute(
                "SELECT key, value FROM kv WHERE ns=? ORDER BY key", (ns,))]

    def kv_delete(self, ns: str, key: str) -> None:
        with self._lock, self._write("kv delete"):
            self._db.execute("DELETE FROM kv WHERE ns=? AND key=?", (ns, key))

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _payload_bytes(self) -> int:
        with self._lock:
            return self._payload_bytes_locked()

    def _payload_bytes_locked(self) -> int:
        return int(self._db.execute("SELECT COALESCE(SUM(length(value)),0) FROM records").fetchone()[0])

    def _write(self, what: str) -> _Txn:
        return _Txn(self._db, self.path, what)

    @staticmethod
    def _row(r: tuple) -> SpoolRecord:
        return SpoolRecord(int(r[0]), r[1], r[2], float(r[3]), bytes(r[4]), bool(r[5]))


def _topics(topic: str | Collection[str] | None) -> tuple[str, tuple[str, ...]]:
    """The SQL condition (and its arguments) for one topic name or any of several."""
    if topic is None:
        return "", ()
    names = (topic,) if isinstance(topic, str) else tuple(topic)
    return f" AND topic IN ({','.join('?' * len(names))})", names


class _Txn:
    """BEGIN/COMMIT around a write; turns SQLite failures into a clear SpoolError."""

    def __init__(self, db: sqlite3.Connection, path: Path, what: str) -> None:
        self.db, self.path, self.what = db, path, what

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, et: type | None, ev: BaseException | None, tb: object) -> bool:
        if et is None:
            try:
                self.db.execute("COMMIT")
                return False
            except sqlite3.Error as e:
                ev, et = e, type(e)
        self.db.execute("ROLLBACK") if self.db.in_transaction else None
        if isinstance(ev, sqlite3.Error):
            full = getattr(ev, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "full" in str(ev).lower()
            err = SpoolError(f"spool {self.path}: {self.what} failed: {ev}{' (disk full?)' if full else ''}")
            err.disk_full = full
            raise err from None
        return False
