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

Why blocks: a record is written as a row, and once published (or appended as
history nobody publishes) it is history that is only ever read back. Each
topic's published rows are moved, :data:`BLOCK_BYTES` of values at a time,
into one zlib-compressed block (consecutive snapshots of a fleet differ in a
few numbers, so a block is ~10-20x smaller than its rows, and SQLite's
per-row and index costs go with the rows). Values come back byte for byte,
with their ids, keys and times; a block is found by (topic, time range) like
a row. Records still to publish stay rows, so the outbox is as it was.
"""

from __future__ import annotations

import array
import heapq
import os
import sqlite3
import struct
import sys
import threading
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from itertools import accumulate
from operator import xor
from pathlib import Path

#: The spool file's format (SQLite ``user_version``): 0, rows only, opens and is read as it is.
FORMAT = 1
#: Published values of a topic gathered into one block once they add up to this much.
BLOCK_BYTES = 256 << 10
#: At most this many blocks sealed per topic per write (a rows-only spool's backlog goes a little at a time).
SEAL_PER_WRITE = 8
CODEC_ZLIB = 1
_ZLIB_LEVEL = 6
#: A key/value entry this big (the engine's saved state, rewritten every 30 s) is stored compressed.
KV_COMPRESS_BYTES = 64 << 10

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
CREATE TABLE IF NOT EXISTS blocks (
    first_id INTEGER PRIMARY KEY,
    last_id INTEGER NOT NULL,
    topic TEXT NOT NULL,
    ts_min REAL NOT NULL,
    ts_max REAL NOT NULL,
    n INTEGER NOT NULL,
    codec INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS blocks_topic_span ON blocks(topic, ts_max, ts_min, last_id);
CREATE INDEX IF NOT EXISTS blocks_span ON blocks(ts_max, ts_min, last_id);
CREATE INDEX IF NOT EXISTS blocks_age ON blocks(ts_min);
CREATE TABLE IF NOT EXISTS kv (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    codec INTEGER NOT NULL DEFAULT 0,
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


#: What :meth:`Spool.append_many` takes: (topic, key, ts, value).
Row = tuple[str, str | None, float, bytes]


@dataclass(frozen=True, slots=True)
class _BlockRef:
    """A block found for a read, before its data is loaded."""

    first_id: int
    last_id: int


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
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if version > FORMAT:
                self._db.close()
                raise SpoolError(f"spool {self.path}: format {version} was written by a newer gpuwarden "
                                 f"(this one reads up to {FORMAT}); use that version, or move the file aside")
            self._db.executescript(_SCHEMA)
            if "codec" not in {c[1] for c in self._db.execute("PRAGMA table_info(kv)")}:  # format 0's kv
                self._db.execute("ALTER TABLE kv ADD COLUMN codec INTEGER NOT NULL DEFAULT 0")
            if version < FORMAT:
                self._db.execute(f"PRAGMA user_version={FORMAT}")
            #: Published bytes still in rows, by topic: a block is sealed when one reaches BLOCK_BYTES.
            self._sealable: dict[str, int] = {}
            self._resync_sealable_locked()
        except sqlite3.Error as e:
            raise SpoolError(f"spool {self.path}: cannot open ({e})") from None
        self._bytes_estimate = self._payload_bytes()

    # ------------------------------------------------------------------ records

    def append(self, topic: str, value: bytes, *, key: str | None = None, ts: float,
               published: bool = False) -> int:
        return self.append_many([(topic, key, ts, value)], published=published)[-1]

    def append_many(self, rows: Iterable[Row], *, published: bool = False) -> list[int]:
        """Append records in one transaction; returns their ids, in order.

        ``published=True``: history that nothing sends on (a standalone run's records, an
        import): never pending, compressed into blocks like records once published.
        On a full disk the oldest records make room (a tenth of the payload, at
        least twice the batch; counted in ``dropped``) and the append is tried
        once more; if that fails too the :class:`SpoolError` says the disk is full.
        """
        rows = list(rows)
        try:
            return self._append_many(rows, published)
        except SpoolError as e:
            if not e.disk_full:
                raise
            need = max(2 * sum(len(r[3]) for r in rows), self._bytes_estimate // 10)
            with self._lock, self._write("evict on full disk"):
                dropped = self._drop_oldest_locked(need)
            if not dropped:
                raise
            return self._append_many(rows, published)

    def _append_many(self, rows: list[Row], published: bool) -> list[int]:
        ids: list[int] = []
        with self._lock, self._write("append"):
            for topic, key, ts, value in rows:
                cur = self._db.execute(
                    "INSERT INTO records(topic, key, ts, value, published) VALUES (?,?,?,?,?)",
                    (topic, key, ts, value, int(published)),
                )
                ids.append(int(cur.lastrowid))
            self._bytes_estimate += sum(len(r[3]) for r in rows)
            if published:
                for topic, _, _, value in rows:
                    self._sealable[topic] = self._sealable.get(topic, 0) + len(value)
                self._seal_locked({r[0] for r in rows})
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
            topics = set()
            for i in ids:
                row = self._db.execute("UPDATE records SET published=1 WHERE id=? AND published=0 "
                                       "RETURNING topic, length(value)", (i,)).fetchone()
                if row is not None:
                    self._sealable[row[0]] = self._sealable.get(row[0], 0) + row[1]
                    topics.add(row[0])
            self._seal_locked(topics)

    def read(self, topic: str | None = None, since: float | None = None,
             until: float | None = None, after_id: int = 0) -> Iterator[SpoolRecord]:
        """Records in append order, optionally by topic and event-time range [since, until).

        Rows and the blocks whose time range meets [since, until) are found by (topic, ts) in
        one snapshot; a block is loaded when the read reaches it (one evicted by then is skipped).
        """
        rq = "SELECT id, topic, key, ts, value, published FROM records WHERE id>?"
        bq = "SELECT first_id, last_id FROM blocks WHERE last_id>?"
        args: list = [after_id]
        if topic is not None:
            rq, bq = rq + " AND topic=?", bq + " AND topic=?"
            args.append(topic)
        rargs, bargs = list(args), list(args)
        if since is not None:
            rq, bq = rq + " AND ts>=?", bq + " AND ts_max>=?"
            rargs.append(since)
            bargs.append(since)
        if until is not None:
            rq, bq = rq + " AND ts<?", bq + " AND ts_min<?"
            rargs.append(until)
            bargs.append(until)
        with self._lock:
            rows = [self._row(r) for r in self._db.execute(rq + " ORDER BY id", rargs)]
            # Sorted here: an ORDER BY first_id would have SQLite walk the table instead of the covering index.
            refs = sorted((_BlockRef(*b) for b in self._db.execute(bq, bargs)), key=lambda b: b.first_id)
        yield from _merged(rows, refs, lambda ref: [
            r for r in self._block(ref.first_id)
            if r.id > after_id and (since is None or r.ts >= since) and (until is None or r.ts < until)])

    def _block(self, first_id: int) -> list[SpoolRecord]:
        """A block's records (none if it was evicted since it was found)."""
        with self._lock:
            row = self._db.execute("SELECT topic, codec, data FROM blocks WHERE first_id=?", (first_id,)).fetchone()
        return [] if row is None else _unpack(self.path, row[0], row[1], bytes(row[2]))

    def last_id(self) -> int:
        """The id of the newest record ever appended (0 for none; AUTOINCREMENT's counter, so eviction
        does not lower it): a reader that follows the spool with ``read(after_id=...)`` knows from one
        lookup that nothing was appended since it last read (the web console)."""
        with self._lock:
            row = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name='records'").fetchone()
        return int(row[0]) if row else 0

    def topics(self) -> dict[str, int]:
        with self._lock:
            counts = dict(self._db.execute("SELECT topic, COUNT(*) FROM records GROUP BY topic"))
            for topic, n in self._db.execute("SELECT topic, SUM(n) FROM blocks GROUP BY topic"):
                counts[topic] = counts.get(topic, 0) + int(n)
        return counts

    def _seal_locked(self, topics: Iterable[str]) -> None:
        """Move each topic's oldest published rows into blocks while BLOCK_BYTES of them wait."""
        for topic in sorted(topics):
            for _ in range(SEAL_PER_WRITE):
                if self._sealable.get(topic, 0) < BLOCK_BYTES:
                    break
                batch, size = [], 0
                cur = self._db.execute("SELECT id, topic, key, ts, value, published FROM records "
                                       "WHERE published=1 AND topic=? ORDER BY id", (topic,))
                for r in cur:
                    batch.append(self._row(r))
                    size += len(r[4])
                    if size >= BLOCK_BYTES:
                        break
                cur.close()
                if size < BLOCK_BYTES:  # the estimate ran ahead of the rows (evicted meanwhile): resync
                    self._sealable[topic] = size
                    break
                data = self._insert_block_locked(batch)
                self._db.executemany("DELETE FROM records WHERE id=?", [(r.id,) for r in batch])
                self._sealable[topic] -= size
                self._bytes_estimate += data - size

    def _insert_block_locked(self, records: list[SpoolRecord]) -> int:
        """Write ``records`` (one topic, in id order) as one block; returns its compressed size."""
        data = zlib.compress(_pack(records), _ZLIB_LEVEL)
        ts = [r.ts for r in records]
        self._db.execute("INSERT INTO blocks(first_id, last_id, topic, ts_min, ts_max, n, codec, data) "
                         "VALUES (?,?,?,?,?,?,?,?)", (records[0].id, records[-1].id, records[0].topic,
                                                      min(ts), max(ts), len(records), CODEC_ZLIB, data))
        return len(data)

    def evict(self, now: float) -> int:
        """Drop records past the age limit, then oldest first until under the size limit.

        Returns how many were dropped; the total is kept in the ``dropped`` counter
        so the agent can report it as an event. A block that holds records on both
        sides of the age limit is written again without the old ones.
        """
        cutoff = now - self.max_age_s
        dropped = 0
        with self._lock, self._write("evict"):
            dropped += self._db.execute("DELETE FROM records WHERE ts < ?", (cutoff,)).rowcount
            for first_id, topic, codec, data in self._db.execute(
                    "SELECT first_id, topic, codec, data FROM blocks WHERE ts_min < ?", (cutoff,)).fetchall():
                records = _unpack(self.path, topic, codec, bytes(data))
                kept = [r for r in records if r.ts >= cutoff]
                self._db.execute("DELETE FROM blocks WHERE first_id=?", (first_id,))
                if kept:
                    self._insert_block_locked(kept)
                dropped += len(records) - len(kept)
            if dropped:
                self._count_dropped_locked(dropped)
            if self._payload_bytes_locked() > self.max_bytes:
                dropped += self._drop_oldest_locked(self._payload_bytes_locked() - self.max_bytes)
            self._bytes_estimate = self._payload_bytes_locked()
            self._resync_sealable_locked()
        return dropped

    def _drop_oldest_locked(self, excess: int) -> int:
        """Delete the oldest rows and blocks (by their first record) whose stored bytes cover
        ``excess``; count their records as dropped."""
        rows = self._db.execute("SELECT id, length(value), 1, 0 FROM records ORDER BY id")
        blocks = self._db.execute("SELECT first_id, length(data), n, 1 FROM blocks ORDER BY first_id")
        acc, row_cut, block_cut, n = 0, None, None, 0
        for rid, size, count, is_block in heapq.merge(rows, blocks):
            acc += size
            n += count
            if is_block:
                block_cut = rid
            else:
                row_cut = rid
            if acc >= excess:
                break
        rows.close()
        blocks.close()
        if row_cut is not None:
            self._db.execute("DELETE FROM records WHERE id <= ?", (row_cut,))
        if block_cut is not None:
            self._db.execute("DELETE FROM blocks WHERE first_id <= ?", (block_cut,))
        if n:
            self._count_dropped_locked(n)
        self._bytes_estimate = max(0, self._bytes_estimate - acc)
        self._resync_sealable_locked()
        return n

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
        self.kv_put_many(ns, [(key, value)])

    def kv_put_many(self, ns: str, items: Iterable[tuple[str, bytes]]) -> None:
        with self._lock, self._write("kv put"):
            self._db.executemany(
                "INSERT INTO kv(ns, key, value, codec) VALUES (?,?,?,?) "
                "ON CONFLICT(ns, key) DO UPDATE SET value=excluded.value, codec=excluded.codec",
                [(ns, k, *_kv_stored(v)) for k, v in items],
            )

    def kv_get(self, ns: str, key: str) -> bytes | None:
        with self._lock:
            row = self._db.execute("SELECT value, codec FROM kv WHERE ns=? AND key=?", (ns, key)).fetchone()
        return None if row is None else _kv_value(self.path, ns, key, row[0], row[1])

    def kv_items(self, ns: str) -> list[tuple[str, bytes]]:
        with self._lock:
            return [(k, _kv_value(self.path, ns, k, v, c)) for k, v, c in self._db.execute(
                "SELECT key, value, codec FROM kv WHERE ns=? ORDER BY key", (ns,))]

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
        """What the records take: the rows' values and the blocks' compressed bytes."""
        return int(self._db.execute("SELECT (SELECT COALESCE(SUM(length(value)),0) FROM records) + "
                                    "(SELECT COALESCE(SUM(length(data)),0) FROM blocks)").fetchone()[0])

    def _resync_sealable_locked(self) -> None:
        self._sealable = dict(self._db.execute(
            "SELECT topic, SUM(length(value)) FROM records WHERE published=1 GROUP BY topic"))

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


def _kv_stored(value: bytes) -> tuple[bytes, int]:
    """A key/value entry as stored, and its codec: compressed when it is big and that helps."""
    if len(value) >= KV_COMPRESS_BYTES and len(packed := zlib.compress(value, _ZLIB_LEVEL)) < len(value):
        return packed, CODEC_ZLIB
    return value, 0


def _kv_value(path: Path, ns: str, key: str, stored: bytes, codec: int) -> bytes:
    if codec == 0:
        return bytes(stored)
    if codec == CODEC_ZLIB:
        return zlib.decompress(stored)
    raise SpoolError(f"spool {path}: state {ns}/{key} has codec {codec}, unknown to this gpuwarden")


def _merged(rows: list[SpoolRecord], refs: list[_BlockRef],
            load: Callable[[_BlockRef], list[SpoolRecord]]) -> Iterator[SpoolRecord]:
    """Rows and blocks' records in id order, each block loaded only when its first id comes up
    (blocks of different topics, and a topic's late-published rows, overlap in ids)."""
    heap: list[tuple[int, int, SpoolRecord, Iterator[SpoolRecord]]] = []
    seq = 0

    def push(it: Iterator[SpoolRecord]) -> None:
        nonlocal seq
        if (r := next(it, None)) is not None:
            heapq.heappush(heap, (r.id, seq, r, it))
            seq += 1

    push(iter(rows))
    i = 0
    while True:
        while i < len(refs) and (not heap or refs[i].first_id < heap[0][0]):
            push(iter(load(refs[i])))
            i += 1
        if not heap:
            return
        _, _, r, it = heapq.heappop(heap)
        yield r
        push(it)


def _le(a: array.array) -> bytes:
    if sys.byteorder == "big":
        a = array.array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _shuffled(values: Iterable[int]) -> bytes:
    """64-bit integers, little-endian, byte-transposed (all first bytes, then all second...):
    columns of small deltas become long runs of zeros."""
    b = _le(array.array("q", values))
    return b"".join(b[i::8] for i in range(8))


def _unshuffled(data: memoryview, n: int) -> array.array:
    out = bytearray(8 * n)
    for i in range(8):
        out[i::8] = data[i * n:(i + 1) * n]
    a = array.array("q", bytes(out))
    if sys.byteorder == "big":
        a.byteswap()
    return a


def _pack(records: list[SpoolRecord]) -> bytes:
    """A block's records as one byte string: the count, then columns (ids as deltas, times as
    the XOR of successive bit patterns, key and value lengths), then the keys and the values."""
    ids = [r.id for r in records]
    bits = array.array("q", array.array("d", [r.ts for r in records]).tobytes())
    keys = [None if r.key is None else r.key.encode() for r in records]
    return b"".join([
        struct.pack("<I", len(records)),
        _shuffled([ids[0], *(b - a for a, b in zip(ids, ids[1:]))]),
        _shuffled([bits[0], *(a ^ b for a, b in zip(bits, bits[1:]))]),
        _shuffled(-1 if k is None else len(k) for k in keys),
        _shuffled(len(r.value) for r in records),
        *(k for k in keys if k is not None),
        *(r.value for r in records),
    ])


def _unpack(path: Path, topic: str, codec: int, data: bytes) -> list[SpoolRecord]:
    """A block's records, as :func:`_pack` laid them out."""
    if codec != CODEC_ZLIB:
        raise SpoolError(f"spool {path}: a block of {topic} has codec {codec}, unknown to this gpuwarden")
    p = memoryview(zlib.decompress(data))
    n = struct.unpack_from("<I", p)[0]
    cols = [_unshuffled(p[4 + 8 * n * c:4 + 8 * n * (c + 1)], n) for c in range(4)]
    ids = list(accumulate(cols[0]))
    ts = array.array("d", array.array("q", accumulate(cols[1], xor)).tobytes())
    off = 4 + 32 * n
    keys: list[str | None] = []
    for k in cols[2]:
        keys.append(None if k < 0 else str(p[off:off + k], "utf-8"))
        off += max(k, 0)
    out = []
    for i, size in enumerate(cols[3]):
        out.append(SpoolRecord(ids[i], topic, keys[i], ts[i], bytes(p[off:off + size]), True))
        off += size
    return out


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
