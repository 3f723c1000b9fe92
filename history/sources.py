"""Where replayed records come from: a JSONL file, the local spool, or Kafka by time range.

Every source yields decoded contract records of the engine's input kinds
(snapshots, events, task metrics) and reports records it cannot use to an
``on_reject(where, reason)`` callback instead of stopping, so one bad line
never hides the rest of an incident.  Order: a file and the spool replay in
the order they were written (so a replay of a recorded run matches the live
run exactly); Kafka partitions are merged by event time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwarden.contract import ContractError, GpuEvent, InferenceMetrics, NodeCapacity, NodeSnapshot, SchedulerJob, \
    SchedulerPoll, TaskMetric, TaskMetrics, Topics, decode
from gpuwarden.schedpolls import PollExpander, primed
from gpuwarden.spool import Spool
from gpuwarden.units import parse_time

#: The record kinds the engine consumes; everything else in a source is passed over.
INPUT_KINDS = (NodeSnapshot, GpuEvent, TaskMetric, InferenceMetrics, SchedulerJob, NodeCapacity, SchedulerPoll)
InputRecord = NodeSnapshot | GpuEvent | TaskMetric | InferenceMetrics | SchedulerJob | NodeCapacity | SchedulerPoll
OnReject = Callable[[str, str], None]



class ReplayError(ValueError):
    """A source that cannot be read at all (missing file, bad time range, unreachable broker)."""


def time_range(since: str | None, until: str | None, now: float) -> tuple[float | None, float | None]:
    """Both ends parsed; an empty or inverted range is an error rather than an empty replay."""
    try:
        lo, hi = parse_time(since, now), parse_time(until, now)
    except ValueError as e:
        raise ReplayError(str(e)) from None
    if lo is not None and hi is not None and hi <= lo:
        raise ReplayError(f"--until ({hi:.0f}) must be after --since ({lo:.0f})")
    return lo, hi


def in_range(ts: float, since: float | None, until: float | None) -> bool:
    return (since is None or ts >= since) and (until is None or ts < until)


def _ignore(where: str, reason: str) -> None:
    """Default reject sink: the caller did not ask to hear about unusable records."""


#: How far a task-metrics batch's items may come after its ``ts`` (their earliest) for a time-range
#: read of the spool, which selects by that ``ts``, to find them: an agent batches one tick's.
BATCH_SPAN_S = 300.0


def _usable(data: bytes | str, where: str, on_reject: OnReject,
            polls: PollExpander | None = None) -> list[InputRecord]:
    """The engine's inputs in one stored record: a task-metrics batch gives its items, and in the
    spool (``polls``) a scheduler record the whole poll's records it stands for."""
    try:
        rec = decode(data)
    except ContractError as e:
        on_reject(where, str(e))
        return []
    if type(rec) is TaskMetrics:
        return rec.unpack()  # type: ignore[return-value]
    if polls is not None:
        return [r for r in polls.feed(rec) if isinstance(r, INPUT_KINDS)]
    return [rec] if isinstance(rec, INPUT_KINDS) else []


# --------------------------------------------------------------------------- file


def read_file(path: str | Path, since: float | None = None, until: float | None = None,
              on_reject: OnReject = _ignore) -> Iterator[InputRecord]:
    """Contract records from a JSONL file (``gpuwarden run --record``, ``agent --output``), in file order."""
    p = Path(path)
    try:
        fh = p.open("rb")
    except OSError as e:
        raise ReplayError(f"{p}: cannot read ({e.strerror})") from None
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            for rec in _usable(line, f"{p}:{lineno}", on_reject):
                if in_range(rec.ts, since, until):
                    yield rec


# --------------------------------------------------------------------------- spool


def input_topics(prefix: str = "") -> list[str]:
    t = Topics(prefix)
    return [t.samples, t.events, t.metrics, t.inference, t.jobs]


def spool_path(location: str | Path) -> Path:
    """``--spool`` takes the spool file or the directory holding ``spool.db``."""
    p = Path(location)
    if p.is_dir():
        p = p / "spool.db"
    if not p.is_file():
        raise ReplayError(f"{p}: no spool there")
    return p


def read_spool(spool: Spool, since: float | None = None, until: float | None = None, *,
               topic_prefix: str = "", on_reject: OnReject = _ignore) -> Iterator[InputRecord]:
    """The engine's input topics from a spool, in append order (the live run's order).
    :class:`ReplayError` when the spool holds them only under another topic prefix (a config
    other than the one that wrote it): zero transitions would say nothing."""
    topics = set(input_topics(topic_prefix))
    held = spool.topics()
    if held and not topics & held.keys():
        others = {t: n for t, n in sorted(held.items())
                  if any(t.endswith(base) and t != base for base in input_topics())
                  or (topic_prefix and t in input_topics())}
        if others:
            prefixes = sorted({next(t[: -len(b)] for b in input_topics() if t.endswith(b)) for t in others})
            raise ReplayError(
                f"the spool holds no records under topic prefix {topic_prefix!r} "
                f"(kafka.topic_prefix of this config), but {', '.join(f'{t}: {n}' for t, n in others.items())} "
                f"under prefix {' and '.join(repr(p) for p in prefixes)}: replay with a config that has "
                f"kafka.topic_prefix: {prefixes[0]!r}")
    start = None if since is None else since - BATCH_SPAN_S
    polls = primed(spool, Topics(topic_prefix).jobs, start)  # what the first polls repeat
    for row in spool.read(since=start, until=until):
        if row.topic in topics:
            for rec in _usable(row.value, f"spool {row.topic} #{row.id}", on_reject, polls):
                if in_range(rec.ts, since, until):
                    yield rec


# --------------------------------------------------------------------------- kafka


@dataclass(slots=True)
class KafkaReadStats:
    """What a time-range read touched: ``fetched`` < the topics' size shows offsets_for_times worked."""

    partitions: int = 0
    fetched: int = 0
    in_range: int = 0


async def read_kafka(client_kw: dict[str, Any], topics: Iterable[str], since: float | None,
                     until: float | None, *, slack_s: float = 300.0, on_reject: OnReject = _ignore,
                     stats: KafkaReadStats | None = None, timeout_s: float = 60.0) -> list[InputRecord]:
    """Records with ``since <= ts < until`` from ``topics``, merged in event-time order.

    Each partition starts at ``offsets_for_times(since - slack_s)``: Kafka's
    record timestamp is when the record was produced, never much before its
    event time (``slack_s`` covers clock skew), and later for records the agent
    buffered through an outage, which are therefore still found.  Each partition
    is read up to its end offset as of the start, so the read is bounded.
    """
    from aiokafka import AIOKafkaConsumer

    from gpuwarden.kafka import start_client

    stats = stats if stats is not None else KafkaReadStats()
    consumer = AIOKafkaConsumer(**client_kw, enable_auto_commit=False, group_id=None,
                                auto_offset_reset="earliest")
    await start_client(consumer, client_kw, timeout_s)  # KafkaConnectError says why, never the password
    out: list[tuple[float, int, int, int, InputRecord]] = []
    try:
        names = list(topics)
        present = [t for t in names if t in await consumer.topics()]
        if not present:
            raise ReplayError(f"none of the topics {', '.join(names)} exist on the cluster")
        tps = await _partitions(consumer, present, timeout_s)
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        if since is not None:
            found = await consumer.offsets_for_times({tp: max(0, int((since - slack_s) * 1000)) for tp in tps})
            starts = {tp: (ends[tp] if hit is None else hit.offset) for tp, hit in found.items()}
        else:
            starts = await consumer.beginning_offsets(tps)
        todo = {tp for tp in tps if starts[tp] < ends[tp]}
        stats.partitions = len(todo)
        for tp in tps:
            consumer.seek(tp, starts[tp]) if tp in todo else consumer.pause(tp)
        rank = {t: i for i, t in enumerate(names)}
        deadline = asyncio.get_running_loop().time() + timeout_s
        while todo:
            if asyncio.get_running_loop().time() > deadline:
                raise ReplayError(f"Kafka read did not finish in {timeout_s:.0f} s")
            batch = await consumer.getmany(*todo, timeout_ms=500)
            for tp, msgs in batch.items():
                for m in msgs:
                    if m.offset >= ends[tp]:
                        break
                    stats.fetched += 1
                    for rec in _usable(m.value or b"", f"{tp.topic}[{tp.partition}]@{m.offset}", on_reject):
                        if in_range(rec.ts, since, until):
                            out.append((rec.ts, rank[tp.topic], tp.partition, m.offset, rec))
                if await consumer.position(tp) >= ends[tp]:
                    todo.discard(tp)
                    consumer.pause(tp)
    finally:
        await consumer.stop()
    out.sort(key=lambda r: r[:4])
    stats.in_range = len(out)
    return [r[4] for r in out]


async def _partitions(consumer: Any, topics: list[str], timeout_s: float) -> list[Any]:
    """Every partition of ``topics``: assigning one partition each makes the client track them."""
    from aiokafka import TopicPartition

    consumer.assign([TopicPartition(t, 0) for t in topics])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while any(consumer.partitions_for_topic(t) is None for t in topics):
        if loop.time() > deadline:
            raise ReplayError(f"no partition metadata for {', '.join(topics)} in {timeout_s:.0f} s")
        await asyncio.sleep(0.05)
    return [TopicPartition(t, p) for t in topics for p in sorted(consumer.partitions_for_topic(t))]
