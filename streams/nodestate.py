"""Stage 1's state per node (``NodeState``), per GPU and per task, as ``dump``/``load`` write it."""

from __future__ import annotations

from bisect import bisect_left
from math import ceil

from gpuwarden.streams.alerts import AlertSlot
from gpuwarden.streams.allocations import NodeAllocations
from gpuwarden.streams.growth import Minima
from gpuwarden.streams.reorder import ReorderBuffer
from gpuwarden.streams.statecodec import state
from gpuwarden.streams.windows import BucketWindow, EventLog, Keep

#: Memory back within this fraction of its pre-checkpoint level counts as released.
CKPT_TOLERANCE = 0.005
#: ``ckpt_released`` is absent this long after the last checkpoint_end.
CKPT_HORIZON = 1800.0
#: How long finished checkpoints are counted back (a memory-leak's growth is judged over up to 2 h).
CKPT_KEEP_S = 4 * 3600.0
#: Without checkpoints from the SDK, one is inferred only from an idle stretch at most this long
#: that interrupts a busy GPU and ends with it busy again, memory back at its level before.
CKPT_INFER_S = 180.0
#: Release order among records with the same ts: snapshots (``Snap``), events, task metrics,
#: job allocations (from the scheduler stage).
SNAPSHOT, EVENT, METRIC, ALLOC = 0, 1, 2, 3
SOURCES = 4

def keep_for(reach: dict, raw: tuple[str, ...], derived: tuple[str, ...], bucket: float,
             extra: dict | None = None) -> Keep:
    """Buckets per (mean, max) column that rules (and ``extra`` internal reads) can look at.

    A read reaching ``w`` seconds back sees at most ceil(w / bucket) + 1 closed buckets;
    every mean column keeps at least its newest bucket (latest values, summaries).
    """
    need = {**reach}
    for k, w in (extra or {}).items():
        need[k] = w if need.get(k) is None else max(w, need[k])

    def count(key: tuple[str, bool]) -> int:
        if key not in need:
            return 0 if key[1] else 1  # a maximum nothing reads is not even computed
        w = max(need[key] or 0.0, 2 * bucket)  # a latest-value read looks two buckets back
        return int(ceil(w / bucket)) + 1

    return Keep(tuple(count((n, False)) for n in raw + derived), tuple(count((n, True)) for n in raw))


def _window(keep: Keep) -> BucketWindow:
    return BucketWindow(max(*keep.means, *keep.maxes), keep)


@state
class CheckpointMemory:
    """A GPU's memory around its task's last training checkpoint: did it fall back after it?
    Until it is judged, the checkpoint before it (``prior``: its end and verdict) says."""

    __slots__ = ("begin", "mem_at_begin", "end", "released", "prior", "task", "ends")
    ADDED = {"task": str, "ends": list}  # state written before checkpoints were told apart by task, counted

    def __init__(self, begin: float, mem_at_begin: float | None, prior: CheckpointMemory | None = None,
                 task: str = "") -> None:
        self.task = task  # the task whose SDK reported it
        self.begin = begin
        self.mem_at_begin = mem_at_begin  # GiB, the newest bucket mean at checkpoint_begin
        self.end: float | None = None
        self.released: int | None = None  # 1 back at the level, 0 not, None: not judged yet
        self.prior: list | None = None  # [end, released] of the last judged checkpoint before it
        #: when the task's checkpoints before it ended, the last ``CKPT_KEEP_S`` (a growth's "since it began")
        self.ends: list[float] = []
        if prior is not None:
            # the ends are in time order (a node's task metrics are handled in ts order), so the
            # ones kept are a tail: found by bisection, not a comparison per end (a task that
            # checkpoints every 2 s has ~3,600 ends per GPU, and each begin copied them all)
            done = prior.finished()
            self.ends = done[bisect_left(done, True, key=lambda e: begin - e <= CKPT_KEEP_S):]
            if prior.end is not None and prior.released is not None:
                self.prior = [prior.end, prior.released]
            else:
                self.prior = prior.prior

    def ended(self, ts: float) -> None:
        self.end, self.released = ts, None

    def finished(self) -> list[float]:
        """When the task's checkpoints ended (this one's last, if it has)."""
        return self.ends if self.end is None else [*self.ends, self.end]

    def overlaps(self, since: float) -> bool:
        """The checkpoint was open at some time after ``since`` (the bucket now closing); one
        not ended within ``CKPT_HORIZON`` never will be (its task died writing it)."""
        return since - self.begin < CKPT_HORIZON if self.end is None else self.end > since

    def observe(self, mem: float | None) -> None:
        """A bucket closed with mean memory ``mem``: after the end, is it (still) back at the level?
        Judged again each bucket: memory that grows past the level after a checkpoint gave it back
        is growth the checkpoint did not release (a leak that begins just after one)."""
        if self.end is not None and mem is not None and self.mem_at_begin is not None:
            self.released = 1 if mem <= self.mem_at_begin * (1 + CKPT_TOLERANCE) else 0

    def released_at(self, now: float) -> float | None:
        """The ``ckpt_released`` metric at ``now``: the last judged checkpoint's verdict, if recent."""
        if self.end is not None and self.released is not None:
            end, released = self.end, self.released
        elif self.prior is not None:
            end, released = self.prior
        else:
            return None
        return None if now - end > CKPT_HORIZON else float(released)


@state
class TaskTotals:
    """A task's closed buckets since its last summary, folded into sums (``TaskSummary.stats``)."""

    __slots__ = ("samples", "sums", "counts", "mem_peak_frac")

    def __init__(self) -> None:
        self.samples = 0
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.mem_peak_frac: float | None = None

    def add(self, stat: str, value: float | None) -> None:
        if value is not None:
            self.sums[stat] = self.sums.get(stat, 0.0) + value
            self.counts[stat] = self.counts.get(stat, 0) + 1

    def mean(self, stat: str) -> float | None:
        n = self.counts.get(stat)
        return self.sums[stat] / n if n else None


@state
class GpuState:
    __slots__ = ("index", "uuid", "win", "labels", "owner", "last_seen", "idle_since", "ckpt", "alerts",
                 "events", "minima", "busy_mem", "held")
    ADDED = {"busy_mem": lambda: None, "held": lambda: None}  # state written before checkpoints were inferred

    def __init__(self, index: int, keep: Keep, horizon: float) -> None:
        self.index = index
        self.events = EventLog(horizon)
        self.uuid = ""
        self.win = _window(keep)
        self.labels: dict[str, str] = {}
        self.owner = ""  # task_id holding the GPU, "" when free
        self.last_seen = 0.0
        self.idle_since: float | None = None
        self.ckpt: CheckpointMemory | None = None
        self.alerts: dict[str, AlertSlot] = {}
        self.minima: dict[str, Minima] = {}  # metric -> its minima (growth conditions)
        self.busy_mem: float | None = None  # memory of the last closed bucket, if the GPU was busy in it
        #: an idle stretch that may be a checkpoint no SDK reports, its buckets held out of the minima:
        #: [memory before it, [[bucket end, [growth metrics' means]], ...]]
        self.held: list | None = None


@state
class TaskState:
    __slots__ = ("task_id", "labels", "gpus", "win", "last_seen", "ended", "totals", "alerts", "ckpt_open",
                 "ckpt_s")

    def __init__(self, task_id: str, labels: dict[str, str], keep: Keep) -> None:
        self.task_id = task_id
        self.labels = labels
        self.gpus: list[int] = []
        self.win = _window(keep)
        self.last_seen = 0.0
        self.ended = False
        self.totals = TaskTotals()
        self.alerts: dict[str, AlertSlot] = {}
        self.ckpt_open: float | None = None  # ts of the checkpoint_begin not yet ended
        self.ckpt_s = 0.0  # seconds of the open bucket inside ended checkpoints

    def checkpoint_share(self, t_end: float, bucket_s: float) -> float:
        """Share of the bucket ending at ``t_end`` spent inside SDK checkpoints; starts the next."""
        s = self.ckpt_s
        if self.ckpt_open is not None and t_end - self.ckpt_open <= CKPT_HORIZON:  # else: never ended
            s += t_end - max(self.ckpt_open, t_end - bucket_s)
        self.ckpt_s = 0.0
        return min(s / bucket_s, 1.0)


@state
class NodeState:
    __slots__ = ("node", "buffer", "arrivals", "seen", "released", "max_ts", "src_max", "bucket", "period",
                 "gpus", "tasks", "events", "win", "alerts", "driver_version", "cuda_version", "late",
                 "duplicates", "has_samples", "evaluated", "announced", "corrected", "simulated", "allocs",
                 "awaiting")
    ADDED = {"awaiting": list}  # state written before announcements waited for the snapshots

    def __init__(self, node: str, keep: Keep, horizon: float) -> None:
        self.node = node
        self.buffer: ReorderBuffer = ReorderBuffer()  # (ts, (dedup key, arrival), Snap or record)
        self.arrivals = 0
        self.seen: dict[tuple, float] = {}  # dedup id -> ts, for records not older than the release point
        self.released = float("-inf")
        self.max_ts = float("-inf")
        self.src_max = [float("-inf")] * SOURCES  # newest ts per source (SNAPSHOT, EVENT, METRIC, ALLOC)
        self.bucket: int | None = None
        self.period: int | None = None
        self.gpus: dict[int, GpuState] = {}
        self.tasks: dict[str, TaskState] = {}
        self.events = EventLog(horizon)
        self.win = _window(keep)
        self.alerts: dict[str, AlertSlot] = {}
        self.driver_version = ""
        self.cuda_version = ""
        self.late = 0
        self.duplicates = 0
        self.has_samples = False
        self.evaluated = float("-inf")
        self.announced: dict[str, list] = {}  # fingerprint -> [ts, transition JSON] sent on arrival
        self.corrected = 0  # ordered firings that differed from their announcement (arrival.py)
        self.simulated = False  # its records come from the simulator: its alerts say so
        self.allocs = NodeAllocations()  # jobs holding its GPUs (the scheduler join)
        #: [ts, boot id, seq] of buffered events to announce once the node's snapshots reach their ts
        self.awaiting: list[list] = []
