"""Stage 1, keyed by node: per-GPU and per-task windows, hardware and event rules, task summaries.

Hot path (one NodeSnapshot): duplicate check, reduction to a ``Snap`` (its GPUs' window
rows, ``snap.py``), the reorder buffer (``reorder.py``), one tuple per GPU appended to its
open bucket. Everything else (aggregation, derived columns, rules, summaries) runs once per
bucket close in event time. The state it keeps is in ``nodestate.py``, what rules read in
``nodecontext.py``, the task summaries in ``summaries.py``.

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

Events that decide a rule alone (XID, gpu_lost, ECC DBE, …: ``rules.arrival_trigger``) are also
judged on arrival, so a GPU fallen off the bus pages without waiting for the lateness; the
ordered evaluation at their release confirms or corrects what went out (``arrival.py``).

Implausible times: a record more than ``max_past_skew`` behind its node's newest is
set aside (counted ``implausible``), and so are buffered records that a newer record
puts that far behind, so a node whose clock started at 1970 before NTP synced never
releases those records, or sets its watermark on them. (The workers also dead-letter
records that far behind their own clock, or ahead of it by ``max_future_skew``.)
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Set as AbstractSet
from heapq import heapify, heappop, heappush
from operator import itemgetter

from gpuwarden.contract import DEFAULT_MAX_PAST_SKEW_S, GpuEvent, JobAllocation, NodeSnapshot, RecordUnion, \
    TaskMetric, decode, encode, simulated_labels
from gpuwarden.humantime import span
from gpuwarden.streams import allocations, statecodec
from gpuwarden.streams.allocations import Allocation
from gpuwarden.streams.alerts import AlertSlot
from gpuwarden.streams.arrival import ArrivalContext, announce, arrival_rules, confirm, event_fields
from gpuwarden.streams.columns import GPU_DERIVED_COLUMNS, GPU_INDEX, GPU_MISSING, NODE_COLUMNS, TASK_COLUMNS, \
    TASK_DERIVED_COLUMNS, TASK_INDEX, deriver, row_function
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.evaluate import evaluate, resolve_all
from gpuwarden.streams.metrics import GPU_DERIVED, GPU_RAW, NODE_ROW, TASK_DERIVED, TASK_ROW
from gpuwarden.streams.nodecontext import OOM_TREND_S, NodeContext
from gpuwarden.streams.nodestate import ALLOC, CKPT_INFER_S, CKPT_TOLERANCE, EVENT, METRIC, SNAPSHOT, \
    CheckpointMemory, GpuState, NodeState, TaskState, keep_for
from gpuwarden.streams.output import StageOutput
from gpuwarden.streams.progress import OPEN, AllocationGate
from gpuwarden.streams.reorder import ReorderBuffer, watermark
from gpuwarden.streams.growth import Minima
from gpuwarden.streams.rules import Rule, RulePack, event_reach, growth_reach, series_reach
from gpuwarden.streams.snap import Owner, Snap
from gpuwarden.streams.summaries import CHECKPOINT_BUCKET, fold, summarise

#: A record stage 1 takes, as it arrives and as its reorder buffer holds it.
Record = NodeSnapshot | GpuEvent | TaskMetric | JobAllocation
Held = Snap | GpuEvent | TaskMetric | JobAllocation
#: A record's source: its release rank among records with the same ts, and its input.
#: The records a reorder buffer holds as themselves in a state envelope (snapshots go as ``Snap``).
HELD_RECORDS = RecordUnion(GpuEvent, TaskMetric, JobAllocation)
SOURCE_OF: dict[type, int] = {NodeSnapshot: SNAPSHOT, Snap: SNAPSHOT, GpuEvent: EVENT, TaskMetric: METRIC,
                              JobAllocation: ALLOC}
_MEM, _UTIL = GPU_INDEX.mem_used_gib, GPU_INDEX.util_gpu
_PRESENT, _IDLE, _ALLOCATED = GPU_INDEX.present, GPU_INDEX.idle_allocated, GPU_INDEX.allocated
_POWER_FRAC = GPU_INDEX.power_frac
#: An allocated GPU mostly below ``IDLE_UTIL`` is idle (``idle_since``) only while it also draws under
#: this share of its power limit: NVML's utilization counter is coarse at low duty cycles, and a real
#: H200 doing real work read 0-7 % at 228-259 of 700 W (tests/fixtures/h200); idle it draws ~81 W.
IDLE_POWER_FRAC = 0.25
_gpu_derived = deriver(GPU_INDEX, GPU_DERIVED_COLUMNS)
_task_derived = deriver(TASK_INDEX, TASK_DERIVED_COLUMNS)
_step_row = row_function(TASK_COLUMNS, "step_time_s", "data_wait_s", "comm_s")
_task_util_row = row_function(TASK_COLUMNS, "util_gpu")
_node_row = row_function(NODE_COLUMNS, "gpus_present", "gpus_missing")


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
        #: How far the scheduler stage has released allocations (``streams/progress.py``): on
        #: Kafka the gate of the node task's partition (``streams/nodetask.py``); in one
        #: process allocations come in event order with the samples (``OPEN``).
        self.gate: AllocationGate = OPEN
        self._nodes: dict[str, NodeState] = {}
        self._lines: dict[str, dict[int, bytes]] = {}  # node -> arrival -> its buffer line in a dump
        #: node -> heap of (ts, dedup key) of its ``seen`` (not state: rebuilt from ``seen``), so
        #: ``_expire`` finds the released ids without reading every id held
        self._due: dict[str, list[tuple[float, tuple]]] = {}
        self._ctx = NodeContext(self.bucket_s)
        self._event_rules_gpu = [r for r in rules.by_scope["gpu"] if _counts_events(r)]
        self._event_rules_node = [r for r in rules.by_scope["node"] if _counts_events(r)]
        self._arrival_gpu = arrival_rules(rules.by_scope["gpu"])
        self._arrival_node = arrival_rules(rules.by_scope["node"])
        self._arrival_ctx = ArrivalContext(self.bucket_s)
        self.event_horizons = event_reach(rules.by_scope["gpu"] + rules.by_scope["node"])
        self.horizon = max(self.event_horizons.values(), default=0.0)
        #: (metric, its column, span) of the minima growth conditions read.
        self._growth = [(k, GPU_INDEX[k], span) for k, span in sorted(growth_reach(rules.by_scope["gpu"]).items())]
        reach = {sc: series_reach(rules.by_scope[sc]) for sc in ("gpu", "task", "node")}
        b = self.bucket_s
        self.keep_gpu = keep_for(reach["gpu"], GPU_RAW, GPU_DERIVED, b, {("mem_used_gib", False): OOM_TREND_S,
                                                                          ("mem_used_gib", True): 0.0})
        self.keep_task = keep_for(reach["task"], TASK_ROW, TASK_DERIVED, b)
        self.keep_node = keep_for(reach["node"], NODE_ROW, (), b)

    # ------------------------------------------------------------------ state

    def nodes(self) -> list[str]:
        return sorted(self._nodes)

    def state(self, node: str) -> NodeState | None:
        """The node's state, to read (the live view's windows, tests); None for a node never seen."""
        return self._nodes.get(node)

    def allocations(self) -> list[tuple[str, Allocation]]:
        """(node, allocation) of every job holding GPUs on this stage's nodes, as last judged."""
        return [(n, a) for n in self.nodes() for _, a in sorted(self._nodes[n].allocs.jobs.items())]

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
        for _, (_, arrival), rec in buf:
            line = made.get(arrival)
            if line is None:
                line = (b"%d S%s" % (arrival, statecodec.dumps_value(rec)) if type(rec) is Snap
                        else b"%d R%s" % (arrival, encode(rec)))
            lines[arrival] = line
        self._lines[node] = lines
        st.buffer = []  # type: ignore[assignment] - written as the lines
        try:
            head = statecodec.dumps(st)
        finally:
            st.buffer = buf
        return b"\n".join((head, *lines.values()))

    def load(self, node: str, data: bytes) -> None:
        """Inverse of :meth:`dump`."""
        head, *lines = data.split(b"\n")
        st: NodeState = statecodec.loads(head)
        held = []
        for line in lines:
            arrival, _, saved = line.partition(b" ")
            rec = statecodec.loads_value(saved[1:]) if saved[:1] == b"S" else decode(saved[1:], HELD_RECORDS)
            held.append((rec.ts, (_key(rec, SOURCE_OF[type(rec)]), int(arrival)), rec))
        st.buffer = ReorderBuffer(held)
        st.awaiting.sort()  # in ts order (state written before it was kept so)
        st.win.keep = self.keep_node
        for gs in st.gpus.values():
            gs.win.keep = self.keep_gpu
        for t in st.tasks.values():
            t.win.keep = self.keep_task
        self._nodes[node] = st
        self._lines.pop(node, None)
        self._due.pop(node, None)

    def drop(self, node: str) -> None:
        self._nodes.pop(node, None)
        self._lines.pop(node, None)
        self._due.pop(node, None)

    def _dues(self, st: NodeState) -> list[tuple[float, tuple]]:
        """The node's heap of ``seen`` by ts (built from ``seen`` when there is none yet)."""
        due = self._due.get(st.node)
        if due is None:
            due = self._due[st.node] = [(ts, k) for k, ts in st.seen.items()]
            heapify(due)
        return due

    def counters(self) -> dict[str, int]:
        return {"late": sum(s.late for s in self._nodes.values()),
                "duplicates": sum(s.duplicates for s in self._nodes.values()),
                "arrival_corrected": sum(s.corrected for s in self._nodes.values()),
                "implausible": self.implausible}

    def open_slots(self) -> list[tuple[str, AlertSlot]]:
        out = []
        for n in self.nodes():
            st = self._nodes[n]
            for ent in (st, *st.gpus.values(), *st.tasks.values()):
                out.extend((fp, s) for fp, s in ent.alerts.items() if s.firing_since is not None)
            out.extend(allocations.open_slots(st.allocs))
        return out

    # ------------------------------------------------------------------ input

    def process(self, record: Record, behind: AbstractSet[int] = frozenset(),
                out: StageOutput | None = None) -> StageOutput:
        """Take one record; ``behind``: sources (``SNAPSHOT``, ``EVENT``, ``METRIC``) whose input
        is still catching up, so their newest ts holds this node's watermark back (faust only).
        Outputs are appended to ``out`` (a new StageOutput when None), which is returned."""
        if out is None:
            out = StageOutput([], [])
        source = SOURCE_OF.get(type(record))
        if source is None:
            return out  # a record this stage cannot use
        key = _key(record, source)
        st = self._nodes.get(record.node)
        if st is None:
            st = self._nodes[record.node] = NodeState(record.node, self.keep_node, self.horizon)
        if source != ALLOC and record.simulated:  # an allocation's flag marks its job's labels (allocations.py)
            st.simulated = True
        seen = st.seen
        if key in seen:
            st.duplicates += 1
            return out
        ts = record.ts
        if ts < st.max_ts - self.max_past:
            self.implausible += 1
            return out
        if ts < st.released:
            if source == ALLOC:  # a holding, not a reading: in faust it comes through the scheduler
                self._allocation(st, record, out)  # stage, behind the node's samples (a backlog)
                return out
            st.late += 1
            return out
        heappush(self._dues(st), (ts, key))  # keys of one source compare as the buffer's order does
        seen[key] = ts
        if len(seen) > self.cfg.dedup_window:
            del seen[next(iter(seen))]
        held: Held = Snap(record) if source == SNAPSHOT else record  # type: ignore[arg-type]
        if ts > st.src_max[source]:
            st.src_max[source] = ts
        buf = st.buffer
        # An allocation moves the node's time on only while the node has nothing else: on Kafka
        # it comes through the scheduler stage, at any point of the node's own inputs, and one
        # ahead of them would release the node past samples not read yet (dropped as late).
        if ts > st.max_ts and (source != ALLOC or max(st.src_max[:ALLOC]) == -math.inf):
            st.max_ts = ts
            floor = ts - self.max_past
            if st.released < floor:  # buffered records are not older than the release point
                self.implausible += buf.discard_before(floor)  # this far behind: a clock at 1970
        if self.lateness <= 0 and not buf and not behind:
            st.released = ts
            self._handle(st, held, out)
            return out
        if source == EVENT and (self._arrival_gpu or self._arrival_node):
            if st.src_max[SNAPSHOT] >= ts:
                self._announce(st, record, key, out)  # type: ignore[arg-type]
            else:  # its labels depend on the node's snapshots up to its ts: not all here yet
                insort(st.awaiting, [ts, record.boot_id, record.seq])  # type: ignore[union-attr]
        st.arrivals += 1
        buf.add(ts, (key, st.arrivals), held)
        if st.awaiting and source == SNAPSHOT:
            self._announce_awaited(st, out)
        self._release(st, behind, out)
        return out

    def _announce_awaited(self, st: NodeState, out: StageOutput) -> None:
        """The events that waited for the node's snapshots to reach their ts, announced now that
        they have (still buffered: one released meanwhile went through the ordered evaluation).
        So an announcement never depends on how a snapshot and an event of one moment were
        batched: it is what the ordered evaluation will make (Kafka batches the inputs apart)."""
        reached, awaiting = st.src_max[SNAPSHOT], st.awaiting
        if awaiting[0][0] > reached:  # kept in ts order: none is due
            return
        n = bisect_right(awaiting, reached, key=itemgetter(0))
        st.awaiting = awaiting[n:]
        # each in the buffer found by its ts (a catch-up holds thousands of records there, and a
        # scan of them per due event was ~6 % of a worker's CPU), announced in buffer order
        for ts, boot, seq in awaiting[:n]:
            key = (EVENT, boot, seq)
            for _, (k, _), rec in st.buffer.at(ts):
                if k == key and type(rec) is GpuEvent:
                    self._announce(st, rec, key, out)

    def _announce(self, st: NodeState, ev: GpuEvent, key: tuple, out: StageOutput) -> None:
        """The rules ``ev`` decides alone, judged now rather than when the buffer releases it
        (``streams/arrival.py``)."""
        ctx, trs = self._arrival_ctx, out.transitions
        if ev.gpu_index is not None and self._arrival_gpu:
            gs = st.gpus.get(ev.gpu_index) or GpuState(ev.gpu_index, self.keep_gpu, self.horizon)
            trs.extend(announce(st, ev, key, self._arrival_gpu, ctx, gs, _gpu_id(st, gs),
                                _labels_at(st, gs, ev.ts)))
        if self._arrival_node:
            trs.extend(announce(st, ev, key, self._arrival_node, ctx, None, {"node": st.node}, _node_labels(st)))

    def advance(self, node: str, behind: AbstractSet[int], out: StageOutput) -> bool:
        """Release what ``node``'s watermark allows now that fewer inputs are ``behind`` than
        when its last record came (faust: at the end of a fetch), and judge the allocation
        instants ``gate`` now allows. True if anything was."""
        st = self._nodes.get(node)
        if st is None or not (st.buffer or st.allocs.instants):
            return False
        before = len(st.buffer), len(st.allocs.instants)
        if st.buffer:
            self._release(st, behind, out)
        else:
            self._judge_allocations(st, out)
        return (len(st.buffer), len(st.allocs.instants)) != before

    def _release(self, st: NodeState, behind: AbstractSet[int], out: StageOutput) -> None:
        """Hand buffered records up to the watermark to ``_handle``, in content order."""
        held = min(map(st.src_max.__getitem__, behind)) if behind else None  # no generator per call
        for ts, _, rec in st.buffer.release(watermark(st.max_ts, held, self.max_skew, self.lateness)):
            st.released = ts
            self._handle(st, rec, out)
        if st.allocs.instants:  # the node's time moved on: the wait for the scheduler may be over
            self._judge_allocations(st, out)

    def _allocation(self, st: NodeState, rec: JobAllocation, out: StageOutput) -> None:
        trs = allocations.receive(st.allocs, rec)
        if trs is None:
            st.duplicates += 1
        else:
            out.transitions.extend(trs)

    def _judge_allocations(self, st: NodeState, out: StageOutput, through: float | None = None) -> None:
        """The held allocation instants the scheduler watermark (``gate``) allows, or up to ``through``."""
        out.transitions.extend(allocations.judge_through(
            st.allocs, self.cfg.scheduler, self.gate.through(st.max_ts) if through is None else through))

    def flush(self) -> StageOutput:
        """Release every buffered record (end of a finite input) and close the open buckets."""
        out = StageOutput([], [])
        for n in self.nodes():
            st = self._nodes[n]
            for ts, _, rec in st.buffer.drain():
                st.released = ts
                self._handle(st, rec, out)
            self._judge_allocations(st, out, math.inf)
        return out

    # ------------------------------------------------------------------ per record

    def _handle(self, st: NodeState, rec: Held, out: StageOutput) -> None:
        """Apply one released record; its firings that went out on arrival are not sent twice."""
        mark = len(out.transitions)
        ts = rec.ts
        b = int(ts // self.bucket_s)
        if st.bucket is None or st.period is None:
            st.bucket, st.period = b, int(ts // self.period_s)
        elif b > st.bucket:
            self._close(st, (st.bucket + 1) * self.bucket_s, out)
            st.bucket = b
            p = int(ts // self.period_s)
            if p > st.period:
                out.summaries.extend(summarise(st, (st.period + 1) * self.period_s, self.period_s))
                st.period = p
        if type(rec) is Snap:
            self._snapshot(st, rec)
        elif type(rec) is GpuEvent:
            if st.awaiting:  # released before the snapshots reached it: the ordered firing goes out alone
                _drop_awaited(st.awaiting, rec)
            self._event(st, rec, out)
        elif type(rec) is JobAllocation:
            self._allocation(st, rec, out)
        else:
            self._metric(st, rec)  # type: ignore[arg-type]
        if st.announced:
            confirm(st, out.transitions, mark)

    def _snapshot(self, st: NodeState, snap: Snap) -> None:
        ts = snap.ts
        st.has_samples = True
        st.driver_version, st.cuda_version = snap.versions
        owners = snap.owners
        st.allocs.gpu_jobs = snap.jobs
        gpus = st.gpus
        for idx, uuid, row in snap.gpus:
            gs = gpus.get(idx)
            if gs is None:
                gs = gpus[idx] = GpuState(idx, self.keep_gpu, self.horizon)
                gs.uuid = uuid
            gs.last_seen = ts
            owner = owners.get(idx)
            if owner is not None and (owner.task_id or "") != gs.owner:
                self._assign(st, gs, owner, ts)
            elif owner is None and gs.owner:
                gs.owner, gs.labels = "", {}
            gs.win.rows.append(row)
        if owners:
            for gs in gpus.values():
                if gs.owner and gs.last_seen == ts and gs.owner in st.tasks:
                    st.tasks[gs.owner].last_seen = ts

    def _assign(self, st: NodeState, gs: GpuState, owner: Owner, ts: float) -> None:
        """A (new) task holds this GPU: refresh labels and the task's GPU list."""
        gs.owner = owner.task_id or ""
        gs.labels = labels = _owner_labels(st, gs.index, owner)
        gs.idle_since = None  # idleness is the task's that holds the GPU during it, not the one's before
        if gs.ckpt is not None and gs.ckpt.task != gs.owner:  # another task: its checkpoints are not this one's
            gs.ckpt = None
        if gs.owner:
            gs.held = gs.busy_mem = None  # an idle stretch begun under the task before is not this one's checkpoint
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

    def _event(self, st: NodeState, ev: GpuEvent, out: StageOutput) -> None:
        fields = event_fields(ev)
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
                                            _node_labels(st), st.alerts))

    def _metric(self, st: NodeState, m: TaskMetric) -> None:
        t = st.tasks.get(m.task_id)
        if t is None:
            t = st.tasks[m.task_id] = TaskState(
                m.task_id, _mark(st, {"node": st.node, "task": m.task_id, "task_class": m.task}), self.keep_task)
        t.last_seen = m.ts
        kind = m.kind  # a StrEnum: compared as its text (``.value`` is a Python-level property)
        if kind == "step":
            t.win.rows.append(_step_row(step_time_s=m.step_time_s, data_wait_s=m.data_wait_s, comm_s=m.comm_s))
        elif kind in ("checkpoint_begin", "checkpoint_end"):
            if kind == "checkpoint_begin":
                if t.ckpt_open is None:
                    t.ckpt_open = m.ts
            elif t.ckpt_open is not None:
                t.ckpt_s += m.ts - max(t.ckpt_open, (st.bucket or 0) * self.bucket_s)
                t.ckpt_open = None
            for i in t.gpus:
                gs = st.gpus.get(i)
                if gs is None:
                    continue
                if kind == "checkpoint_begin":
                    gs.ckpt = CheckpointMemory(m.ts, gs.win.latest(_MEM), gs.ckpt, m.task_id)
                elif gs.ckpt is not None:
                    gs.ckpt.ended(m.ts)
        elif kind == "exit":
            t.ended = True

    # ------------------------------------------------------------------ bucket close

    def _close(self, st: NodeState, t: float, out: StageOutput) -> None:
        ctx, rules = self._ctx, self.rules.by_scope
        present = missing = 0
        if st.has_samples:
            for gs in st.gpus.values():
                if not gs.win.rows and t - gs.last_seen < self.cfg.gpu_expiry and gs.last_seen:
                    gs.win.rows.append(GPU_MISSING)
                b = gs.win.close(t, _gpu_derived)
                if b is None:
                    continue
                means = b.means
                if means[_PRESENT]:
                    present += 1
                else:
                    missing += 1
                idle, power = means[_IDLE], means[_POWER_FRAC]
                if idle is not None and idle >= 0.5 and (power is None or power < IDLE_POWER_FRAC):
                    if gs.idle_since is None:
                        gs.idle_since = t - self.bucket_s
                else:
                    gs.idle_since = None
                if gs.ckpt is not None:
                    gs.ckpt.observe(means[_MEM])
                if self._growth:
                    self._grow(gs, t, means)
            st.win.rows.append(_node_row(gpus_present=float(present), gpus_missing=float(missing)))
            st.win.close(t)
        st.has_samples = False
        for task in st.tasks.values():
            utils = [st.gpus[i].win.latest(_UTIL) for i in task.gpus if i in st.gpus]
            utils = [u for u in utils if u is not None]
            if utils:
                task.win.rows.append(_task_util_row(util_gpu=sum(utils) / len(utils)))
            in_checkpoint = task.checkpoint_share(t, self.bucket_s) >= CHECKPOINT_BUCKET
            tb = task.win.close(t, _task_derived)
            if tb is not None:
                fold(st, task, tb, in_checkpoint)
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
        out.transitions.extend(evaluate(rules["node"], ctx, t, {"node": st.node}, _node_labels(st),
                                        st.alerts))
        a = st.allocs
        through = self.gate.through(st.max_ts)
        if a.jobs or a.queue or a.instants or through < t:  # else nothing to judge, and none can come
            allocations.hold(a, st.gpus, t, st.simulated)
            self._judge_allocations(st, out, through)

    def _grow(self, gs: GpuState, t: float, means: list) -> None:
        """The bucket ending at ``t`` into the GPU's growth minima, unless a checkpoint covers it
        (its staging is no growth). Where the task's SDK reports checkpoints, only the buckets they
        overlap stay out. Where it reports none, a checkpoint is inferred from its signature, seen
        whole: an idle stretch of at most ``CKPT_INFER_S`` after a busy bucket, ending busy again with
        memory back at its level before the stretch. Its buckets are held until then, and go in after
        all when the stretch turns out to be something else (longer, or memory not given back), so
        low utilization alone never hides growth: a leak at 0-7 % is judged on every bucket."""
        b = self.bucket_s
        vals = [means[at] for _, at, _ in self._growth]
        held, gs.held = gs.held, None
        if gs.ckpt is not None:
            if held is not None:  # held before the SDK's first checkpoint: no checkpoint of its
                self._add_growth(gs, held[1])
            if not gs.ckpt.overlaps(t - b):
                self._add_growth(gs, [[t, vals]])
            gs.busy_mem = None
            return
        idle = means[_IDLE] is not None and means[_IDLE] >= 0.5
        mem, before = means[_MEM], gs.busy_mem
        busy = not idle and (means[_ALLOCATED] or 0.0) >= 0.5 and means[_UTIL] is not None
        gs.busy_mem = mem if busy and mem is not None else None
        if idle:
            if held is None and before is not None:  # idle after busy: perhaps a checkpoint
                gs.held = [before, [[t, vals]]]
                return
            if held is not None and t - held[1][0][0] + b <= CKPT_INFER_S:
                held[1].append([t, vals])
                gs.held = held
                return
        if held is not None and not (busy and mem is not None and mem <= held[0] * (1 + CKPT_TOLERANCE)):
            self._add_growth(gs, held[1])  # not a checkpoint after all: too long, or memory kept
        self._add_growth(gs, [[t, vals]])

    def _add_growth(self, gs: GpuState, rows: list) -> None:
        for t, vals in rows:
            for (metric, _, span), v in zip(self._growth, vals):
                m = gs.minima.get(metric)
                if m is None:
                    m = gs.minima[metric] = Minima(span)
                m.add(t, v, self.bucket_s)

    def _expire(self, st: NodeState, t: float, out: StageOutput) -> None:
        if len(st.seen) > 64:  # ids of released records: a copy of one is late anyway
            # the ids older than the release point, found on the heap: a catch-up's buffer holds
            # thousands, and a pass over all of them at each close cost 2.8 % of a worker's CPU.
            # An entry whose id is gone (the dedup window) or came again with another ts is passed.
            released, seen, due = st.released, st.seen, self._dues(st)
            while due and due[0][0] < released:
                ts, k = heappop(due)
                if seen.get(k) == ts:
                    del seen[k]
        horizons = self.event_horizons
        st.events.expire(t, horizons)
        for idx in sorted(st.gpus):
            gs = st.gpus[idx]
            gs.events.expire(t, horizons)
            if t - gs.last_seen >= self.cfg.gpu_expiry:
                out.transitions.extend(resolve_all(gs.alerts, t, f"resolved: the GPU sent nothing for "
                                                                 f"{span(t - gs.last_seen)}"))
                del st.gpus[idx]
        for tid in sorted(st.tasks):
            task = st.tasks[tid]
            if task.ended or t - task.last_seen >= self.cfg.task_expiry:
                why = "the task ended" if task.ended else f"the task sent nothing for {span(t - task.last_seen)}"
                out.transitions.extend(resolve_all(task.alerts, t, "resolved: " + why))
                del st.tasks[tid]


def _drop_awaited(awaiting: list[list], ev: GpuEvent) -> None:
    """Forget ``ev``'s wait for the snapshots, found by its ts (kept in ts order: a catch-up
    holds thousands of events there, and a scan per released event was ~4 % of a worker's CPU)."""
    i = bisect_left(awaiting, ev.ts, key=itemgetter(0))
    while i < len(awaiting) and awaiting[i][0] == ev.ts:
        if awaiting[i][1] == ev.boot_id and awaiting[i][2] == ev.seq:
            del awaiting[i]
            return
        i += 1


def _gpu_id(st: NodeState, gs: GpuState) -> dict[str, str]:
    return {"node": st.node, "gpu": str(gs.index)}


def _mark(st: NodeState, labels: dict[str, str]) -> dict[str, str]:
    """An entity's labels, marked when the node is simulated (issue #18, defect 6)."""
    return simulated_labels(labels) if st.simulated else labels


def _node_labels(st: NodeState) -> dict[str, str]:
    return _mark(st, {"node": st.node})


def _gpu_labels(st: NodeState, gs: GpuState) -> dict[str, str]:
    return gs.labels or _mark(st, {"node": st.node, "gpu": str(gs.index)})


def _owner_labels(st: NodeState, index: int, owner: Owner) -> dict[str, str]:
    """A GPU's labels while ``owner`` holds it."""
    labels = {"node": st.node, "gpu": str(index)}
    for k, v in (("user", owner.user), ("task", owner.task_id), ("task_class", owner.task_class),
                 ("project", owner.project)):
        if v:
            labels[k] = v
    return _mark(st, labels)


def _labels_at(st: NodeState, gs: GpuState, ts: float) -> dict[str, str]:
    """The GPU's labels once the buffered snapshots up to ``ts`` are applied, as ``_snapshot``
    will apply them: the labels the ordered evaluation at ``ts`` gives an alert."""
    owner, labels, index = gs.owner, gs.labels, gs.index
    for t, _, rec in st.buffer:
        if t > ts:
            break
        if type(rec) is not Snap:
            continue
        held = rec.owners.get(index)
        # a snapshot that would change nothing is passed over before its GPUs are looked at (a
        # catch-up's buffer holds thousands of them, read for every event announced)
        if (owner == (held.task_id or "")) if held is not None else not owner:
            continue
        if not any(i == index for i, _, _ in rec.gpus):
            continue
        if held is not None:
            owner, labels = held.task_id or "", _owner_labels(st, index, held)
        else:
            owner, labels = "", {}
    return labels or _mark(st, {"node": st.node, "gpu": str(gs.index)})


def _key(record: Record | Held, source: int) -> tuple:
    """The record's dedup key, and after ts its release order: its source, then its own ids."""
    if source == METRIC:
        m: TaskMetric = record  # type: ignore[assignment]
        return (METRIC, m.task_id, str(m.kind), -1 if m.step is None else m.step, m.ts)  # StrEnum: its text, in C
    if source == ALLOC:
        a: JobAllocation = record  # type: ignore[assignment]
        return (ALLOC, a.cluster, a.job_id, a.released, a.ts)
    return (source, record.boot_id, record.seq)  # type: ignore[union-attr]


def _counts_events(rule: Rule) -> bool:
    return bool(event_reach([rule]))
