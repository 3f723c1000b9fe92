"""Stage 1, keyed by node: per-GPU and per-task windows, hardware and event rules, task summaries.

Hot path (one NodeSnapshot): duplicate check, reorder buffer, one tuple per GPU
appended to its open bucket. Everything else (aggregation, derived metrics,
rules, summaries) runs once per bucket close in event time.

Out-of-order records: a per-node reorder buffer holds records until the node's
watermark is ``allowed_lateness`` past them, then releases them in a content
order — (ts, source rank: snapshot, event, task metric, then the record's own
ids) — so records that arrive interleaved differently (faust merges its input
topics in fetch order) are released identically. The watermark is the node's
newest ts, held back to the newest ts of any input the caller says is still
``behind`` (catching up on a backlog), at most ``max_source_skew``. A record
older than the last released one is dropped and counted in ``late``. Duplicates
(same boot_id+seq, or the same task metric) not yet released are dropped and
counted in ``duplicates`` (once released, a copy is older than the release point:
``late``). ``flush()`` releases the buffer at the end of a finite input.

Implausible times: a record more than ``max_past_skew`` behind its node's newest is
set aside (counted ``implausible``), and so are buffered records that a newer record
puts that far behind, so a node whose clock started at 1970 before NTP synced never
releases those records, or sets its watermark on them. (The workers also dead-letter
records that far behind their own clock, or ahead of it by ``max_future_skew``.)
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Set as AbstractSet
from math import ceil
from operator import attrgetter
from typing import Any

from gpuwarden.contract import (
    DEFAULT_MAX_PAST_SKEW_S,
    GpuEvent,
    NodeSnapshot,
    TaskMetric,
    TaskSummary,
    decode,
    encode,
)
from gpuwarden.streams import statecodec
from gpuwarden.streams import trend as tr
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.evaluate import Context, evaluate, resolve_all
from gpuwarden.streams.metrics import GPU_INDEX, GPU_RAW, NODE_INDEX, TASK_INDEX
from gpuwarden.streams.metrics import GPU_DERIVED, NODE_ROW, TASK_DERIVED, TASK_ROW
from gpuwarden.streams.rules import RulePack, event_reach, series_reach
from gpuwarden.streams.statecodec import state
from gpuwarden.streams.windows import BucketWindow, EventLog, pack_floats, unpack_floats

_GIB = float(1 << 30)
#: The GPU columns a window row is made of (``Snap``).
_G = attrgetter("index", "util_gpu", "mem_used_bytes", "mem_total_bytes", "temp_gpu_c", "power_w",
                "power_limit_w", "clock_sm_mhz", "clock_sm_max_mhz", "clock_event_reasons",
                "ecc_volatile_uncorrected", "remap_pending", "remap_failure")
_MISSING = tuple(0.0 if n == "present" else None for n in GPU_RAW)
_I = GPU_INDEX
_MEM, _TOT, _UTIL, _PRES, _IDLE = _I["mem_used_gib"], _I["mem_total_gib"], _I["util_gpu"], _I["present"], \
    _I["idle_allocated"]
IDLE_UTIL = 5.0
CKPT_TOLERANCE = 0.005
CKPT_HORIZON = 1800.0
OOM_TREND_S = 900.0
OOM_MONOTONIC = 0.75
#: Release order among records with the same ts: the snapshot, then events, then task metrics.
RANKS = {NodeSnapshot: 0, GpuEvent: 1, TaskMetric: 2}


def keep_for(reach: dict, raw: tuple, derived: tuple, bucket: float, extra: dict | None = None) -> tuple:
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

    return (tuple(count((n, False)) for n in raw + derived), tuple(count((n, True)) for n in raw))


def _gpu_derived(m: list) -> list:
    used, total, power, limit = m[_MEM], m[_TOT], m[_I["power_w"]], m[_I["power_limit_w"]]
    clk, clk_max, temp = m[_I["clock_sm_mhz"]], m[_I["clock_sm_max_mhz"]], m[_I["temp_gpu_c"]]
    return [
        used / total if used is not None and total else None,
        total - used if used is not None and total is not None else None,
        power / limit if power is not None and limit else None,
        clk / clk_max if clk is not None and clk_max else None,
        temp / power if temp is not None and power else None,
    ]


def _task_derived(m: list) -> list:
    st, dw, cm = m[0], m[1], m[2]
    return [dw / st if dw is not None and st else None, cm / st if cm is not None and st else None]


@state
class GpuState:
    __slots__ = ("index", "uuid", "win", "labels", "owner", "last_seen", "idle_since", "ckpt", "alerts",
                 "events")

    def __init__(self, index: int, keep: tuple, horizon: float) -> None:
        self.index = index
        self.events = EventLog(horizon)
        self.uuid = ""
        self.win = BucketWindow(max(*keep[0], *keep[1]), keep)
        self.labels: dict = {}
        self.owner = ""  # task_id holding the GPU, "" when free
        self.last_seen = 0.0
        self.idle_since: float | None = None
        self.ckpt: list | None = None  # [begin_ts, mem_at_begin, end_ts|None, released 1/0/None]
        self.alerts: dict = {}


@state
class TaskState:
    __slots__ = ("task_id", "labels", "gpus", "win", "last_seen", "ended", "acc", "alerts")

    def __init__(self, task_id: str, labels: dict, keep: tuple) -> None:
        self.task_id = task_id
        self.labels = labels
        self.gpus: list[int] = []
        self.win = BucketWindow(max(*keep[0], *keep[1]), keep)
        self.last_seen = 0.0
        self.ended = False
        self.acc: dict = {}
        self.alerts: dict = {}


@state
class NodeState:
    __slots__ = ("node", "buffer", "arrivals", "seen", "released", "max_ts", "src_max", "bucket", "period",
                 "gpus", "tasks", "events", "win", "alerts", "versions", "late", "duplicates",
                 "has_samples", "evaluated")

    def __init__(self, node: str, keep: tuple, horizon: float) -> None:
        self.node = node
        self.buffer: deque = deque()  # sorted (ts, rank, *ids, arrival, record)
        self.arrivals = 0
        self.seen: dict = {}  # dedup id -> ts, for records not older than the release point
        self.released = float("-inf")
        self.max_ts = float("-inf")
        self.src_max = [float("-inf")] * len(RANKS)
        self.bucket: int | None = None
        self.period: int | None = None
        self.gpus: dict = {}
        self.tasks: dict = {}
        self.events = EventLog(horizon)
        self.win = BucketWindow(max(*keep[0], *keep[1]), keep)
        self.alerts: dict = {}
        self.versions = ["", ""]
        self.late = 0
        self.duplicates = 0
        self.has_samples = False
        self.evaluated = float("-inf")


@state
class Snap:
    """A NodeSnapshot reduced, as it arrives, to what this stage reads: per GPU its index, uuid
    and window row, and per GPU the process that holds it. The reorder buffer holds the allowed
    lateness of them (~30 per node at 1 s ticks): a decoded snapshot of 8 GPUs is ~18 kB of
    Python objects (~43 kB in node_snapshot/1's row form), this is ~4 kB, and a checkpoint
    writes it without re-encoding the record (it was ~80 % of a node's state bytes). The
    decoded record is freed at once."""

    __slots__ = ("ts", "node", "boot_id", "seq", "versions", "gpus", "owners")

    def __init__(self, snap: NodeSnapshot) -> None:
        self.ts, self.node, self.boot_id, self.seq = snap.ts, snap.node, snap.boot_id, snap.seq
        self.versions = (snap.driver_version or "", snap.cuda_version or "")
        owners: dict[int, tuple] = {}  # gpu index -> (task_id, user, task class, project)
        p = snap.processes
        for gpu, task_id, user, task, project in zip(p.gpu_index, p.task_id, p.user, p.task, p.project):
            if gpu not in owners or (task_id and not owners[gpu][0]):
                owners[gpu] = (task_id, user, task, project)
        self.owners = owners
        # One window row per GPU, in ``gpuwarden.streams.metrics.GPU_RAW`` order; written out inline
        # rather than a function per GPU (worker hot path 93 -> 87 µs per snapshot).
        self.gpus = tuple(
            (i, uuid, (
                util, None if mu is None else mu / _GIB, None if mt is None else mt / _GIB, temp, pw, pl,
                clk, clkmax,
                None if reasons is None else (1.0 if reasons & 0x8 else 0.0),    # hw_slowdown
                None if reasons is None else (1.0 if reasons & 0x40 else 0.0),   # hw_thermal
                None if reasons is None else (1.0 if reasons & 0x80 else 0.0),   # power_brake
                None if reasons is None else (1.0 if reasons & 0x20 else 0.0),   # sw_thermal
                ecc, None if rpend is None else float(rpend), None if rfail is None else float(rfail),
                1.0 if i in owners else 0.0,                                       # allocated
                (1.0 if util < IDLE_UTIL else 0.0) if i in owners and util is not None else 0.0,
                0.0 if util is None and mu is None and temp is None else 1.0))   # present
            for uuid, (i, util, mu, mt, temp, pw, pl, clk, clkmax, reasons, ecc, rpend, rfail)
            in zip(snap.gpus.uuid, zip(*_G(snap.gpus))))

    # Compact state: the rows as one packed float column (a checkpoint writes ~30 per node).
    def __getstate__(self) -> dict:
        return {"ts": self.ts, "node": self.node, "boot_id": self.boot_id, "seq": self.seq,
                "versions": list(self.versions), "owners": [[i, *o] for i, o in self.owners.items()],
                "gpus": [[i, u] for i, u, _ in self.gpus],
                "rows": pack_floats([v for _, _, row in self.gpus for v in row])}

    def __setstate__(self, s: dict) -> None:
        self.ts, self.node, self.boot_id, self.seq = s["ts"], s["node"], s["boot_id"], s["seq"]
        self.versions = tuple(s["versions"])
        self.owners = {o[0]: tuple(o[1:]) for o in s["owners"]}
        values, n = unpack_floats(s["rows"]), len(GPU_RAW)
        self.gpus = tuple((i, u, tuple(values[k * n:(k + 1) * n])) for k, (i, u) in enumerate(s["gpus"]))


class _NodeCtx(Context):
    """Evaluation context over one node's state; ``select`` chooses the entity."""

    def __init__(self, bucket_s: float) -> None:
        super().__init__()
        self.last_window = 2 * bucket_s
        self.bucket_s = bucket_s
        self.node: NodeState | None = None
        self.gpu: GpuState | None = None
        self.task: TaskState | None = None
        # The entity's window and its metrics' columns, resolved once per entity, not per read.
        self._win: BucketWindow | None = None
        self._index: dict[str, int] = NODE_INDEX

    def select(self, node: NodeState, gpu: GpuState | None = None, task: TaskState | None = None) -> None:
        """Evaluate for ``gpu``, else ``task``, else the node itself."""
        self.node, self.gpu, self.task = node, gpu, task
        if gpu is not None:
            self._win, self._index = gpu.win, GPU_INDEX
        elif task is not None:
            self._win, self._index = task.win, TASK_INDEX
        else:
            self._win, self._index = node.win, NODE_INDEX

    def series(self, metric: str, since: float, use_max: bool = False) -> tuple[list[float], list[float]]:
        assert self._win is not None
        return self._win.series(self._index[metric], since, use_max)

    def scalar(self, metric: str) -> float | None:
        g, now = self.gpu, self.now
        if metric == "time_to_oom_s" and g is not None:
            ts, ys = g.win.series(_MEM, now - OOM_TREND_S)
            total = g.win.latest(_TOT)
            if len(ts) < 4 or total is None:
                return None
            s = tr.slope(ts, ys)
            mono = tr.monotonicity(ys)
            if mono is None or mono < OOM_MONOTONIC or ts[0] - ts[-1] + OOM_TREND_S > 0.25 * OOM_TREND_S + self.bucket_s:
                return None  # a job's start-up ramp is not a trend toward OOM
            ttf = tr.time_to_full(ys[-1], total, s)
            if ttf is not None:
                self.ev["values"]["headroom_gib"] = round(total - ys[-1], 3)
                self.ev["slope"], self.ev["slope_unit"] = round((s or 0) * 3600, 4), "GiB/h"
            return ttf
        if metric == "ckpt_released" and g is not None:
            c = g.ckpt
            if c is None or c[2] is None or c[3] is None or now - c[2] > CKPT_HORIZON:
                return None
            return float(c[3])
        if metric == "idle_hours" and g is not None:
            return _idle_h(g, now)
        if metric in ("idle_card_hours", "gpus") and self.task is not None and self.node is not None:
            gpus = [self.node.gpus[i] for i in self.task.gpus if i in self.node.gpus]
            if metric == "gpus":
                return float(len(gpus))
            return sum(_idle_h(x, now) for x in gpus)
        return None

    def count_events(self, since: float, pred: Any, per: str, kinds: frozenset | None = None) -> int:
        assert self.node is not None
        if per == "gpu":
            return 0 if self.gpu is None else self.gpu.events.count(since, self.now, pred, kinds)
        return self.node.events.count(since, self.now, pred, kinds)

    def has_events(self) -> bool:
        assert self.node is not None
        return not self.node.events.empty() or (self.gpu is not None and not self.gpu.events.empty())


def _idle_h(g: GpuState, now: float) -> float:
    return (now - g.idle_since) / 3600.0 if g.idle_since is not None else 0.0


class NodeStage:
    """Stage 1, keyed by node: per-GPU/per-task windows, hardware/event rules, count-within,
    trends, durations, 1-minute task summaries."""

    def __init__(self, rules: RulePack, config: EngineConfig,
                 max_past_skew: float = DEFAULT_MAX_PAST_SKEW_S) -> None:
        self.rules = rules
        self.cfg = config
        self.max_past = float(max_past_skew)
        self.implausible = 0  # records set aside since start (see the module docstring)
        self.bucket_s = float(config.bucket)
        self.period_s = float(config.summary_interval)
        self.eval_s = float(config.eval_interval)
        self.lateness = float(config.allowed_lateness)
        self.max_skew = float(config.max_source_skew)
        self._nodes: dict[str, NodeState] = {}
        self._lines: dict[str, dict[int, bytes]] = {}  # node -> arrival -> its buffer line in a dump
        self._ctx = _NodeCtx(self.bucket_s)
        gpu_rules = rules.by_scope["gpu"]
        self._event_rules_gpu = [r for r in gpu_rules if _counts_events(r)]
        self._event_rules_node = [r for r in rules.by_scope["node"] if _counts_events(r)]
        self.event_horizons = event_reach(rules.by_scope["gpu"] + rules.by_scope["node"])
        self.horizon = max(self.event_horizons.values(), default=0.0)
        reach = {sc: series_reach(rules.by_scope[sc]) for sc in ("gpu", "task", "node")}
        b = self.bucket_s
        self.keep_gpu = keep_for(reach["gpu"], GPU_RAW, GPU_DERIVED, b, {("mem_used_gib", False): OOM_TREND_S,
                                                                          ("mem_used_gib", True): 0.0})
        self.keep_task = keep_for(reach["task"], TASK_ROW, TASK_DERIVED, b)
        self.keep_node = keep_for(reach["node"], NODE_ROW, (), b)

    # ------------------------------------------------------------------ state

    def nodes(self) -> list[str]:
        return sorted(self._nodes)

    def position(self, node: str) -> tuple[float, float] | None:
        """``(released, newest)``: the ts of the last record the node's buffer released (its
        summaries up to there are made) and of its newest record; None for a node not held."""
        st = self._nodes.get(node)
        return None if st is None else (st.released, st.max_ts)

    def dump(self, node: str) -> bytes:
        """The node's state (JSON), then a line per record in its reorder buffer: ``<arrival>
        S<Snap>`` or ``<arrival> R<record JSON>``. The buffer (the allowed lateness of input) is
        most of a node's state, and a record waits through several checkpoints: its line is
        made once (``_lines``)."""
        st = self._nodes[node]
        buf, made, lines = st.buffer, self._lines.get(node, {}), {}
        for item in buf:
            n, rec = item[-2], item[-1]
            line = made.get(n)
            if line is None:
                line = (b"%d S%s" % (n, statecodec.dumps_value(rec)) if type(rec) is Snap
                        else b"%d R%s" % (n, encode(rec)))
            lines[n] = line
        self._lines[node] = lines
        st.buffer = []  # type: ignore[assignment] - written as the lines
        try:
            head = statecodec.dumps(st)
        finally:
            st.buffer = buf
        return b"\n".join((head, *lines.values()))

    def load(self, node: str, data: bytes) -> None:
        """Inverse of :meth:`dump`; formats 3 and 4 kept the buffer in the document as
        [arrival, Snap or record JSON] pairs."""
        head, *lines = data.split(b"\n")
        st: NodeState = statecodec.loads(head)
        held = [(n, r) for n, r in st.buffer]
        for line in lines:
            n, _, saved = line.partition(b" ")
            held.append((int(n), statecodec.loads_value(saved[1:]) if saved[:1] == b"S" else saved[1:]))
        st.buffer = deque(sorted(_order(_held(r), n) for n, r in held))
        st.win.keep = self.keep_node
        for gs in st.gpus.values():
            gs.win.keep = self.keep_gpu
        for t in st.tasks.values():
            t.win.keep = self.keep_task
        self._nodes[node] = st
        self._lines.pop(node, None)

    def drop(self, node: str) -> None:
        self._nodes.pop(node, None)
        self._lines.pop(node, None)

    def counters(self) -> dict[str, int]:
        return {"late": sum(s.late for s in self._nodes.values()),
                "duplicates": sum(s.duplicates for s in self._nodes.values()),
                "implausible": self.implausible}

    def open_slots(self) -> list[tuple[str, Any]]:
        out = []
        for n in self.nodes():
            st = self._nodes[n]
            for ent in (st, *st.gpus.values(), *st.tasks.values()):
                out.extend((fp, s) for fp, s in ent.alerts.items() if s.firing_since is not None)
        return out

    # ------------------------------------------------------------------ input

    def process(self, record: NodeSnapshot | GpuEvent | TaskMetric, behind: AbstractSet[int] = frozenset(),
                out: Any = None) -> Any:
        """Take one record; ``behind``: source ranks (see ``RANKS``) whose input is still
        catching up, so their newest ts holds this node's watermark back (faust only).
        Outputs are appended to ``out`` (a new StageOutput when None), which is returned."""
        if out is None:
            from gpuwarden.streams.engine import StageOutput

            out = StageOutput([], [])
        ids = _ids(record)
        if ids is None:
            return out  # a record this stage cannot use
        key = ids if ids[0] != 2 else (*ids, record.ts)
        st = self._nodes.get(record.node)
        if st is None:
            st = self._nodes[record.node] = NodeState(record.node, self.keep_node, self.horizon)
        seen = st.seen
        if key in seen:
            st.duplicates += 1
            return out
        ts = record.ts
        if ts < st.max_ts - self.max_past:
            self.implausible += 1
            return out
        if ts < st.released:
            st.late += 1
            return out
        seen[key] = ts
        if len(seen) > self.cfg.dedup_window:
            del seen[next(iter(seen))]
        rank = ids[0]
        if rank == 0:
            record = Snap(record)
        if ts > st.src_max[rank]:
            st.src_max[rank] = ts
        buf = st.buffer
        if ts > st.max_ts:
            st.max_ts = ts
            if buf and buf[0][0] < ts - self.max_past:
                self._set_aside(st, ts - self.max_past)
        if self.lateness <= 0 and not buf and not behind:
            st.released = ts
            self._handle(st, record, rank, out)
            return out
        st.arrivals += 1
        item = (ts, *ids, st.arrivals, record)
        if not buf or item > buf[-1]:
            buf.append(item)
        else:
            insort(buf, item)
        self._release(st, behind, out)
        return out

    def _set_aside(self, st: NodeState, floor: float) -> None:
        """Drop buffered records dated before ``floor`` (implausibly far behind the newest)."""
        buf = st.buffer
        while buf and buf[0][0] < floor:
            buf.popleft()
            self.implausible += 1

    def advance(self, node: str, behind: AbstractSet[int], out: Any) -> bool:
        """Release what ``node``'s watermark allows now that fewer inputs are ``behind`` than
        when its last record came (faust: at the end of a fetch). True if anything was."""
        st = self._nodes.get(node)
        if st is None or not st.buffer:
            return False
        before = len(st.buffer)
        self._release(st, behind, out)
        return len(st.buffer) < before

    def _release(self, st: NodeState, behind: AbstractSet[int], out: Any) -> None:
        """Hand buffered records up to the watermark to ``_handle``, in content order."""
        buf = st.buffer
        water = st.max_ts
        if behind:
            held = min(st.src_max[r] for r in behind)
            water = min(water, max(held, water - self.max_skew))
        water -= self.lateness
        while buf and buf[0][0] <= water:
            item = buf.popleft()
            st.released = item[0]
            self._handle(st, item[-1], item[1], out)

    def flush(self) -> Any:
        """Release every buffered record (end of a finite input) and close the open buckets."""
        from gpuwarden.streams.engine import StageOutput

        out = StageOutput([], [])
        for n in self.nodes():
            st = self._nodes[n]
            while st.buffer:
                item = st.buffer.popleft()
                st.released = item[0]
                self._handle(st, item[-1], item[1], out)
        return out

    # ------------------------------------------------------------------ per record

    def _handle(self, st: NodeState, rec: Any, rank: int, out: Any) -> None:
        ts = rec.ts
        b = int(ts // self.bucket_s)
        if st.bucket is None:
            st.bucket, st.period = b, int(ts // self.period_s)
        elif b > st.bucket:
            self._close(st, (st.bucket + 1) * self.bucket_s, out)
            st.bucket = b
            p = int(ts // self.period_s)
            if p > st.period:
                out.summaries.extend(self._summaries(st, (st.period + 1) * self.period_s))
                st.period = p
        if rank == 0:
            self._snapshot(st, rec)
        elif rank == 1:
            self._event(st, rec, out)
        else:
            self._metric(st, rec)

    def _snapshot(self, st: NodeState, snap: Snap) -> None:
        ts = snap.ts
        st.has_samples = True
        st.versions = list(snap.versions)
        owners = snap.owners
        gpus = st.gpus
        for idx, uuid, row in snap.gpus:
            gs = gpus.get(idx)
            if gs is None:
                gs = gpus[idx] = GpuState(idx, self.keep_gpu, self.horizon)
                gs.uuid = uuid
            gs.last_seen = ts
            p = owners.get(idx)
            if p is not None and (p[0] or "") != gs.owner:
                self._assign(st, gs, p, ts)
            elif p is None and gs.owner:
                gs.owner, gs.labels = "", {}
            gs.win.rows.append(row)
        if owners:
            for gs in gpus.values():
                if gs.owner and gs.last_seen == ts and gs.owner in st.tasks:
                    st.tasks[gs.owner].last_seen = ts

    def _assign(self, st: NodeState, gs: GpuState, p: tuple, ts: float) -> None:
        """A (new) task holds this GPU (``p``: a ``Snap`` owner): refresh labels and the task's GPU list."""
        task_id, user, task_class, project = p
        gs.owner = task_id or ""
        labels = {"node": st.node, "gpu": str(gs.index)}
        for k, v in (("user", user), ("task", task_id), ("task_class", task_class), ("project", project)):
            if v:
                labels[k] = v
        gs.labels = labels
        if gs.owner:
            t = st.tasks.get(gs.owner)
            if t is None:
                t = st.tasks[gs.owner] = TaskState(gs.owner, {}, self.keep_task)
            t.labels = {k: v for k, v in labels.items() if k != "gpu"}
            if gs.index not in t.gpus:
                t.gpus = sorted([*t.gpus, gs.index])
            t.last_seen = ts
        for other in st.tasks.values():
            if other.task_id != gs.owner and gs.index in other.gpus:
                other.gpus = [i for i in other.gpus if i != gs.index]

    def _event(self, st: NodeState, ev: GpuEvent, out: Any) -> None:
        cat = ev.catalogue
        fields = {"kind": ev.kind.value, "code": ev.code, "gpu": ev.gpu_index, "n": max(1, ev.count),
                  "action": cat.action if cat else None, "severity": cat.severity.value if cat else None}
        gs = None
        if ev.gpu_index is not None:
            gs = st.gpus.get(ev.gpu_index)
            if gs is None:
                gs = st.gpus[ev.gpu_index] = GpuState(ev.gpu_index, self.keep_gpu, self.horizon)
                gs.uuid, gs.last_seen = ev.gpu_uuid or "", ev.ts
        if fields["kind"] in self.event_horizons or None in self.event_horizons:
            st.events.add(ev.ts, fields)
            if gs is not None:
                gs.events.add(ev.ts, fields)
        ctx = self._ctx
        if gs is not None and self._event_rules_gpu:
            ctx.select(st, gpu=gs)
            out.transitions.extend(evaluate(self._event_rules_gpu, ctx, ev.ts, _gpu_id(st, gs),
                                            _gpu_labels(st, gs), gs.alerts))
        ctx.select(st)
        if self._event_rules_node:
            out.transitions.extend(evaluate(self._event_rules_node, ctx, ev.ts, {"node": st.node},
                                            {"node": st.node}, st.alerts))

    def _metric(self, st: NodeState, m: TaskMetric) -> None:
        t = st.tasks.get(m.task_id)
        if t is None:
            t = st.tasks[m.task_id] = TaskState(
                m.task_id, {"node": st.node, "task": m.task_id, "task_class": m.task}, self.keep_task)
        t.last_seen = m.ts
        kind = m.kind.value
        if kind == "step":
            t.win.rows.append((m.step_time_s, m.data_wait_s, m.comm_s, None))
        elif kind in ("checkpoint_begin", "checkpoint_end"):
            for i in t.gpus:
                gs = st.gpus.get(i)
                if gs is None:
                    continue
                if kind == "checkpoint_begin":
                    gs.ckpt = [m.ts, gs.win.latest(_MEM), None, None]
                elif gs.ckpt is not None:
                    gs.ckpt[2], gs.ckpt[3] = m.ts, None
        elif kind == "exit":
            t.ended = True

    # ------------------------------------------------------------------ bucket close

    def _close(self, st: NodeState, t: float, out: Any) -> None:
        ctx, rules = self._ctx, self.rules.by_scope
        present = missing = 0
        if st.has_samples:
            for gs in st.gpus.values():
                if not gs.win.rows and t - gs.last_seen < self.cfg.gpu_expiry and gs.last_seen:
                    gs.win.rows.append(_MISSING)
                b = gs.win.close(t, _gpu_derived)
                if b is None:
                    continue
                m = b[1]
                if m[_PRES]:
                    present += 1
                else:
                    missing += 1
                if m[_IDLE] is not None and m[_IDLE] >= 0.5:
                    if gs.idle_since is None:
                        gs.idle_since = t - self.bucket_s
                else:
                    gs.idle_since = None
                c = gs.ckpt
                if c is not None and c[2] is not None and c[3] != 1 and m[_MEM] is not None and c[1] is not None:
                    c[3] = 1 if m[_MEM] <= c[1] * (1 + CKPT_TOLERANCE) else 0
            st.win.rows.append((float(present), float(missing)))
            st.win.close(t)
        st.has_samples = False
        for task in st.tasks.values():
            utils = [st.gpus[i].win.latest(_UTIL) for i in task.gpus if i in st.gpus]
            utils = [u for u in utils if u is not None]
            if utils:
                task.win.rows.append((None, None, None, sum(utils) / len(utils)))
            b = task.win.close(t, _task_derived)
            if b is not None:
                self._accumulate(st, task, b)
        self._expire(st, t, out)
        if t - st.evaluated < self.eval_s:
            return  # not an evaluation instant yet
        st.evaluated = t
        # Rules, in a fixed order: GPUs by index, tasks by id, then the node.
        for idx in sorted(st.gpus):
            gs = st.gpus[idx]
            ctx.select(st, gpu=gs)
            out.transitions.extend(evaluate(rules["gpu"], ctx, t, _gpu_id(st, gs), _gpu_labels(st, gs),
                                            gs.alerts))
        for tid in sorted(st.tasks):
            task = st.tasks[tid]
            ctx.select(st, task=task)
            out.transitions.extend(evaluate(rules["task"], ctx, t, {"node": st.node, "task": tid},
                                            task.labels, task.alerts))
        ctx.select(st)
        out.transitions.extend(evaluate(rules["node"], ctx, t, {"node": st.node}, {"node": st.node},
                                        st.alerts))

    def _expire(self, st: NodeState, t: float, out: Any) -> None:
        if len(st.seen) > 64:  # ids of released records: a copy of one is late anyway
            released = st.released
            st.seen = {k: ts for k, ts in st.seen.items() if ts >= released}
        horizons = self.event_horizons
        st.events.expire(t, horizons)
        for idx in sorted(st.gpus):
            gs = st.gpus[idx]
            gs.events.expire(t, horizons)
            if t - gs.last_seen >= self.cfg.gpu_expiry:
                out.transitions.extend(resolve_all(gs.alerts, t))
                del st.gpus[idx]
        for tid in sorted(st.tasks):
            task = st.tasks[tid]
            if task.ended or t - task.last_seen >= self.cfg.task_expiry:
                out.transitions.extend(resolve_all(task.alerts, t))
                del st.tasks[tid]

    # ------------------------------------------------------------------ summaries

    def _accumulate(self, st: NodeState, task: TaskState, bucket: list) -> None:
        """Fold one closed task bucket (and its GPUs' buckets) into the summary accumulators."""
        acc = task.acc
        m = bucket[1]
        util = m[TASK_INDEX["util_gpu"]]
        if util is None and m[0] is None:
            return
        acc["n"] = acc.get("n", 0) + 1
        for name, v in (("util_gpu", util), ("step_time_s", m[0]), ("data_wait_share", m[4]),
                        ("comm_share", m[5])):
            if v is not None:
                acc[name] = acc.get(name, 0.0) + v
                acc[name + "#"] = acc.get(name + "#", 0) + 1
        for i in task.gpus:
            gs = st.gpus.get(i)
            if gs is None or gs.win.last_end() != bucket[0]:
                continue
            w = gs.win
            peak, total = w.latest(_MEM, use_max=True), w.latest(_TOT)
            if peak is not None and total:
                acc["mem_peak_frac"] = max(acc.get("mem_peak_frac", 0.0), peak / total)
            for name in ("power_w", "temp_per_w"):
                v = w.latest(GPU_INDEX[name])
                if v is not None:
                    acc[name] = acc.get(name, 0.0) + v
                    acc[name + "#"] = acc.get(name + "#", 0) + 1

    def _summaries(self, st: NodeState, t: float) -> list[TaskSummary]:
        out = []
        for tid in sorted(st.tasks):
            task = st.tasks[tid]
            acc, task.acc = task.acc, {}
            if not acc.get("n"):
                continue
            stats = {k: round(acc[k] / acc[k + "#"], 6) for k in
                     ("util_gpu", "step_time_s", "data_wait_share", "comm_share", "power_w", "temp_per_w")
                     if acc.get(k + "#")}
            if "mem_peak_frac" in acc:
                stats["mem_peak_frac"] = round(acc["mem_peak_frac"], 6)
            labels = {k: v for k, v in task.labels.items() if k in ("user", "project")}
            if st.versions[0]:
                labels["driver_version"] = st.versions[0]
            if st.versions[1]:
                labels["cuda_version"] = st.versions[1]
            out.append(TaskSummary(ts=t, task=task.labels.get("task_class", "unknown"), task_id=tid,
                                   node=st.node, window_s=self.period_s, samples=acc["n"],
                                   gpus=len(task.gpus), stats=stats, labels=labels))
        return out


def _gpu_id(st: NodeState, gs: GpuState) -> dict[str, str]:
    return {"node": st.node, "gpu": str(gs.index)}


def _gpu_labels(st: NodeState, gs: GpuState) -> dict[str, str]:
    return gs.labels or {"node": st.node, "gpu": str(gs.index)}


def _ids(record: Any) -> tuple | None:
    """(source rank, the record's own ids): its dedup key and, after ts, its release order."""
    cls = type(record)
    if cls is NodeSnapshot or cls is Snap:
        return (0, record.boot_id, record.seq)
    if cls is TaskMetric:
        return (2, record.task_id, record.kind.value, -1 if record.step is None else record.step)
    if cls is GpuEvent:
        return (1, record.boot_id, record.seq)
    return None


def _held(saved: Any) -> Any:
    """A reorder-buffer record as a dump saved it: a Snap, else a record's JSON (a snapshot
    in state of format 3, before snapshots were reduced on arrival, is reduced now)."""
    if type(saved) is Snap:
        return saved
    record = decode(saved)
    return Snap(record) if type(record) is NodeSnapshot else record


def _order(record: Any, arrival: int) -> tuple:
    """The reorder buffer's sort key: ts, source rank, the record's own ids, then arrival."""
    return (record.ts, *_ids(record), arrival, record)


def _counts_events(rule: Any) -> bool:
    return bool(event_reach([rule]))
