"""What stage 1's rules read: a node's windows, events and the metrics computed at evaluation."""

from __future__ import annotations

from collections.abc import Callable

from gpuwarden.streams import trend as tr
from gpuwarden.streams.columns import GPU_INDEX, NODE_INDEX, TASK_INDEX, Positions
from gpuwarden.streams.evaluate import Context
from gpuwarden.streams.growth import Minima
from gpuwarden.streams.nodestate import GpuState, NodeState, TaskState
from gpuwarden.streams.windows import BucketWindow

#: Time to OOM: memory growth over the longest of these trailing windows that rises steadily (the
#: shorter ones let a leak that began minutes ago be projected before 15 min of it are seen), ...
OOM_WINDOWS_S = (900.0, 600.0, 300.0)
OOM_TREND_S = OOM_WINDOWS_S[0]
#: ... rising this steadily, its later half at least this share of the window's slope (a job's
#: start-up ramp, steep and then level, is not a trend toward OOM).
OOM_MONOTONIC = 0.75
OOM_SUSTAINED = 0.5
_MEM, _TOT = GPU_INDEX.mem_used_gib, GPU_INDEX.mem_total_gib
#: A neighbour counts as capped when a cap costs it at least this share of its SM clock in its
#: newest bucket: the SW power cap bit alone is set on busy GPUs far below their limit (a real
#: H200 at 215 of 700 W lost 1 %, tests/fixtures/h200-leak-probe).
NEIGHBOUR_CAP_LOSS = 0.05


class NodeContext(Context):
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
        self._index: Positions = NODE_INDEX

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

    def minima(self, metric: str) -> Minima | None:
        return None if self.gpu is None else self.gpu.minima.get(metric)

    def checkpoints_since(self, since: float) -> int | None:
        if self.gpu is None:
            return None
        ck = self.gpu.ckpt
        return 0 if ck is None else sum(1 for e in ck.finished() if since < e <= self.now)

    def scalar(self, metric: str) -> float | None:
        g, now = self.gpu, self.now
        if metric == "time_to_oom_s" and g is not None:
            return self._time_to_oom(g)
        if metric == "ckpt_released" and g is not None:
            return None if g.ckpt is None else g.ckpt.released_at(now)
        if metric == "idle_hours" and g is not None:
            return idle_hours(g, now)
        if metric == "idle_s" and g is not None:
            return idle_hours(g, now) * 3600.0
        if metric == "capped_neighbours" and g is not None and self.node is not None:
            return float(sum(1 for x in self.node.gpus.values()
                             if x is not g and (x.win.latest(GPU_INDEX.cap_clock_loss) or 0.0) >= NEIGHBOUR_CAP_LOSS))
        if metric in ("idle_card_hours", "gpus", "idle_s") and self.task is not None and self.node is not None:
            gpus = [self.node.gpus[i] for i in self.task.gpus if i in self.node.gpus]
            if metric == "gpus":
                return float(len(gpus))
            if metric == "idle_s":  # all of them idle: since the last went idle
                return min((idle_hours(x, now) for x in gpus), default=0.0) * 3600.0
            return sum(idle_hours(x, now) for x in gpus)
        return None

    def _time_to_oom(self, g: GpuState) -> float | None:
        total = g.win.latest(_TOT)
        if total is None:
            return None
        for span in OOM_WINDOWS_S:
            ts, ys = g.win.series(_MEM, self.now - span)
            if len(ts) < 4 or ts[0] - ts[-1] + span > 0.25 * span + self.bucket_s:
                continue  # not covered
            mono = tr.monotonicity(ys)
            if mono is None or mono < OOM_MONOTONIC:
                continue  # a job's start-up ramp is not a trend toward OOM
            s, half = tr.slope(ts, ys), len(ts) // 2
            late = tr.slope(ts[half:], ys[half:])
            if s is None or late is None or late < OOM_SUSTAINED * s:
                continue
            ttf = tr.time_to_full(ys[-1], total, s)
            if ttf is not None:
                self.ev["values"]["headroom_gib"] = round(total - ys[-1], 3)
                self.ev["slope"], self.ev["slope_unit"] = round((s or 0) * 3600, 4), "GiB/h"
            return ttf
        return None

    def count_events(self, since: float, pred: Callable[[dict], bool], per: str,
                     kinds: frozenset | None = None) -> int:
        assert self.node is not None
        if per == "gpu":
            return 0 if self.gpu is None else self.gpu.events.count(since, self.now, pred, kinds)
        return self.node.events.count(since, self.now, pred, kinds)

    def has_events(self) -> bool:
        assert self.node is not None
        return not self.node.events.empty() or (self.gpu is not None and not self.gpu.events.empty())


def idle_hours(g: GpuState, now: float) -> float:
    return (now - g.idle_since) / 3600.0 if g.idle_since is not None else 0.0
