"""Portable history: export the spool's records and engine state to one file, import it elsewhere.

File layout (a plain tar, so standard tools can open it):

* ``manifest.json`` — format, time range, nodes, schema versions and record
  counts per topic, and the sha256 of the records and of the state;
* ``records.jsonl.gz`` — gzip JSONL, one contract record per line in the
  order the spool holds them (``gunzip`` it and ``gpuwarden replay
  --from-file`` takes it as is);
* ``state.json`` — the spool's key/value namespaces that make up the engine
  state (baselines) and the control state (silences, acks), values base64.

The checksums are over the uncompressed bytes, so they do not depend on the
gzip level; import verifies both (and the counts) before it writes anything.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwarden import __version__
from gpuwarden.config import CommonSettings
from gpuwarden.contract import ContractError, GpuEvent, NodeSnapshot, TaskMetrics, Topics, decode, encode, record_key
from gpuwarden.history.sources import OnReject, ReplayError, time_range
from gpuwarden.schedpolls import PollCompactor, primed
from gpuwarden.spool import Spool

FORMAT = "gpuwarden-history/1"
MANIFEST, RECORDS, STATE = "manifest.json", "records.jsonl.gz", "state.json"
#: kv namespaces exported with the records: the engine's persisted state and the control state.
STATE_NAMESPACES = ("engine", "control")
BATCH = 2000


class HistoryError(ValueError):
    """An export that cannot be written or an import file that fails verification."""


@dataclass(slots=True)
class ExportSummary:
    records: int
    counts: dict[str, int]
    path: Path


def record_time(rec: Any) -> float:
    """The event time a record is filed under (control records have no ``ts``)."""
    for name in ("ts", "at", "starts_at", "received_at"):
        if (v := getattr(rec, name, None)) is not None:
            return float(v)
    raise TypeError(f"{type(rec).__name__} has no timestamp")


def _base_topic(topic: str, prefix: str) -> str | None:
    """``<prefix>gpu.samples`` → ``gpu.samples``; None for anything not a contract topic."""
    base = {v: v for v in Topics.BASE.values()}
    return base.get(topic[len(prefix):]) if topic.startswith(prefix) else None


def _home(rec: Any) -> str | None:
    """The unprefixed topic a record belongs on (None for dead letters)."""
    try:
        return Topics().for_record(rec)
    except KeyError:
        return None


def _state(spool: Spool) -> bytes:
    out = {ns: {k: base64.b64encode(v).decode() for k, v in spool.kv_items(ns)} for ns in STATE_NAMESPACES}
    return json.dumps({"namespaces": out}, sort_keys=True, indent=1).encode()


def export_history(spool: Spool, out: str | Path, *, since: float | None = None, until: float | None = None,
                   topic_prefix: str = "", site: str = "", now: float | None = None,
                   on_reject: OnReject | None = None) -> ExportSummary:
    """Write the spool's contract records in ``[since, until)`` and its state to ``out``."""
    out = Path(out)
    digest, counts, schemas, nodes = hashlib.sha256(), Counter(), Counter(), set()
    first = last = None
    with tempfile.NamedTemporaryFile(dir=out.parent if out.parent.exists() else None, suffix=".gz") as tmp:
        with gzip.GzipFile(fileobj=tmp, mode="wb", mtime=0) as gz:
            polls = primed(spool, Topics(topic_prefix).jobs, since)  # the file holds whole scheduler polls
            for row in spool.read(since=since, until=until):
                topic = _base_topic(row.topic, topic_prefix)
                if topic is None:
                    continue
                try:
                    stored = decode(row.value)
                except ContractError as e:
                    if on_reject:
                        on_reject(f"spool {row.topic} #{row.id}", str(e))
                    continue
                if _home(stored) != topic:
                    if on_reject:
                        on_reject(f"spool {row.topic} #{row.id}", f"a {stored.schema_} record does not belong there")
                    continue
                for rec in polls.feed(stored):
                    line = encode(rec) + b"\n"
                    gz.write(line)
                    digest.update(line)
                    counts[topic] += 1
                    schemas[rec.schema_] += 1
                    if isinstance(rec, (NodeSnapshot, GpuEvent, TaskMetrics)):
                        nodes.add(rec.node)
                    ts = record_time(rec)
                    first = ts if first is None else min(first, ts)
                    last = ts if last is None else max(last, ts)
        state = _state(spool)
        manifest = {
            "format": FORMAT, "created_at": time.time() if now is None else now, "site": site,
            "gpuwarden_version": __version__, "since": since, "until": until,
            "first_ts": first, "last_ts": last, "nodes": sorted(nodes),
            "schemas": dict(sorted(schemas.items())), "counts": dict(sorted(counts.items())),
            "records": sum(counts.values()), "records_sha256": digest.hexdigest(),
            "state_namespaces": list(STATE_NAMESPACES),
            "state_sha256": hashlib.sha256(state).hexdigest(),
        }
        tmp.flush()
        try:
            with tarfile.open(out, "w") as tar:
                _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=1).encode())
                tar.add(tmp.name, arcname=RECORDS)
                _add_bytes(tar, STATE, state)
        except OSError as e:
            raise HistoryError(f"{out}: cannot write ({e.strerror})") from None
    return ExportSummary(manifest["records"], manifest["counts"], out)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))


# --------------------------------------------------------------------------- import


class HistoryFile:
    """An export opened for reading; :meth:`verify` before trusting anything in it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._tar = tarfile.open(self.path, "r")
            self.manifest = json.loads(self._member(MANIFEST))
            self._state = self._member(STATE)
        except OSError as e:
            raise HistoryError(f"{self.path}: cannot read ({e.strerror})") from None
        except tarfile.TarError:
            raise HistoryError(f"{self.path}: not a gpuwarden history file (not a tar archive)") from None
        except (json.JSONDecodeError, KeyError) as e:
            raise HistoryError(f"{self.path}: not a gpuwarden history file ({e})") from None
        if self.manifest.get("format") != FORMAT:
            raise HistoryError(f"{self.path}: format {self.manifest.get('format')!r}, expected {FORMAT!r}")

    def _member(self, name: str) -> bytes:
        f = self._tar.extractfile(name)
        if f is None:
            raise KeyError(name)
        return f.read()

    def lines(self) -> Iterator[bytes]:
        f = self._tar.extractfile(RECORDS)
        if f is None:
            raise HistoryError(f"{self.path}: {RECORDS} missing")
        with gzip.GzipFile(fileobj=f) as gz:
            yield from gz

    def records(self) -> Iterator[Any]:
        for n, line in enumerate(self.lines(), 1):
            try:
                yield decode(line)
            except ContractError as e:
                raise HistoryError(f"{self.path}: {RECORDS} line {n}: {e}") from None

    def state(self) -> dict[str, dict[str, bytes]]:
        ns = json.loads(self._state)["namespaces"]
        return {name: {k: base64.b64decode(v) for k, v in items.items()} for name, items in ns.items()}

    def verify(self) -> None:
        """Checksums and counts against the manifest, and every record decodes; raises HistoryError."""
        m = self.manifest
        if hashlib.sha256(self._state).hexdigest() != m["state_sha256"]:
            raise HistoryError(f"{self.path}: {STATE} checksum mismatch (file damaged?)")
        digest, counts = hashlib.sha256(), Counter()
        try:
            for n, line in enumerate(self.lines(), 1):
                digest.update(line)
                try:
                    rec = decode(line)
                except ContractError as e:
                    raise HistoryError(f"{self.path}: {RECORDS} line {n}: {e}") from None
                counts[_home(rec)] += 1
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise HistoryError(f"{self.path}: {RECORDS} unreadable ({e})") from None
        if digest.hexdigest() != m["records_sha256"]:
            raise HistoryError(f"{self.path}: {RECORDS} checksum mismatch (file damaged?)")
        if dict(counts) != m["counts"]:
            raise HistoryError(f"{self.path}: record counts {dict(counts)} differ from the manifest's {m['counts']}")

    def close(self) -> None:
        self._tar.close()

    def __enter__(self) -> HistoryFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _batches(it: Iterator[Any], n: int = BATCH) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for x in it:
        batch.append(x)
        if len(batch) >= n:
            yield batch
            batch = []
    if batch:
        yield batch


def import_to_spool(hf: HistoryFile, spool: Spool, topic_prefix: str = "") -> int:
    """Append every record (under this site's topic prefix; scheduler records on change, as a run
    stores them) and restore the state; returns the count of the file's records."""
    topics, n, polls = Topics(topic_prefix), 0, PollCompactor()

    def store(records: list[Any]) -> None:
        spool.append_many(((topics.for_record(r), record_key(r), record_time(r), encode(r)) for r in records),
                          published=True)

    for batch in _batches(hf.records()):
        store([s for r in batch for s in polls.store(r)])
        n += len(batch)
    store(polls.flush())
    restore_state(hf, spool)
    return n


def restore_state(hf: HistoryFile, spool: Spool) -> None:
    """The exported engine and control state into the spool's key/value store."""
    for ns, items in hf.state().items():
        spool.kv_put_many(ns, items.items())


async def import_to_kafka(hf: HistoryFile, client_kw: dict[str, Any], topic_prefix: str = "", *,
                          partitions: int = 4, replication_factor: int = 1) -> int:
    """Produce every record to its topic with its key; Kafka stamps them with the import time.

    Import time rather than event time: old event-time stamps would let the
    topics' time retention delete the imported history at once. Replay by time
    range still finds them (it filters on the records' own ``ts``).
    """
    from gpuwarden.kafka import produce_records

    return await produce_records(hf.records(), client_kw, topic_prefix, batch=BATCH, partitions=partitions,
                                 replication_factor=replication_factor)


# --------------------------------------------------------------------------- commands


def _warn(where: str, reason: str) -> None:
    print(f"gpuwarden export: skipped {where}: {reason}", file=sys.stderr)


def cmd_export(args: argparse.Namespace, settings: CommonSettings) -> int:
    try:
        since, until = time_range(args.since, args.until, time.time())
    except ReplayError as e:
        print(f"gpuwarden export: {e}", file=sys.stderr)
        return 2
    try:
        with Spool(settings.spool.path) as spool:
            s = export_history(spool, args.out, since=since, until=until,
                               topic_prefix=settings.kafka.topic_prefix, site=settings.site, on_reject=_warn)
    except HistoryError as e:
        print(f"gpuwarden export: {e}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{t} {c}" for t, c in s.counts.items()) or "nothing in range"
    print(f"wrote {s.path}: {s.records} records ({counts})", file=sys.stderr)
    return 0


def warn_eviction(first: float | None, max_age_s: float) -> None:
    """Imported history older than the spool's age limit would go at the next eviction: say so."""
    if first is not None and first < time.time() - max_age_s:
        print(f"gpuwarden import: warning: records from {time.strftime('%Y-%m-%d', time.gmtime(first))} are "
              f"older than spool.max_age ({max_age_s / 86400:g} d) and will be evicted at the next "
              f"'gpuwarden run'; raise spool.max_age to keep them", file=sys.stderr)


def cmd_import(args: argparse.Namespace, settings: CommonSettings) -> int:
    import asyncio

    try:
        with HistoryFile(args.file) as hf:
            hf.verify()
            if args.kafka:
                from gpuwarden.kafka import client_kwargs

                kw = {**client_kwargs(settings), "bootstrap_servers": args.kafka}
                k = settings.kafka
                n = asyncio.run(import_to_kafka(hf, kw, k.topic_prefix, partitions=k.partitions,
                                                replication_factor=k.replication_factor))
                where = f"Kafka {args.kafka}"
                with Spool(settings.spool.path) as spool:
                    restore_state(hf, spool)
            else:
                with Spool(settings.spool.path) as spool:
                    n = import_to_spool(hf, spool, settings.kafka.topic_prefix)
                where = f"spool {settings.spool.path}"
                warn_eviction(hf.manifest.get("first_ts"), settings.spool.max_age)
    except HistoryError as e:
        print(f"gpuwarden import: {e}", file=sys.stderr)
        return 1
    print(f"imported {n} records into {where} (checksums verified)", file=sys.stderr)
    return 0
