"""What stage 1's rules read: a node's windows, events and the metrics computed at evaluation."""

from __future__ import annotations

from collections.abc import Callable

from gpuwarden.streams import trend as tr
from gpuwarden.streams.columns import GPU_INDEX, NODE_INDEX, TASK_INDEX, Positions
from gpuwarden.streams.evaluate import Context
from gpuwarden.streams.nodestate import GpuState, NodeState, TaskState
from gpuwarden.streams.windows import BucketWindow

#: Time to OOM: memory growth over this long, ...
OOM_TREND_S = 900.0
#: ... rising this steadily (a job's start-up ramp is not a trend toward OOM).
OOM_MONOTONIC = 0.75
_MEM, _TOT = GPU_INDEX.mem_used_gib, GPU_INDEX.mem_total_gib


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

    def scalar(self, metric: str) -> float | None:
        g, now = self.gpu, self.now
        if metric == "time_to_oom_s" and g is not None:
            return self._time_to_oom(g)
        if metric == "ckpt_released" and g is not None:
            return None if g.ckpt is None else g.ckpt.released_at(now)
        if metric == "idle_hours" and g is not None:
            return idle_hours(g, now)
        if metric in ("idle_card_hours", "gpus") and self.task is not None and self.node is not None:
            gpus = [self.node.gpus[i] for i in self.task.gpus if i in self.node.gpus]
            if metric == "gpus":
                return float(len(gpus))
            return sum(idle_hours(x, now) for x in gpus)
        return None

    def _time_to_oom(self, g: GpuState) -> float | None:
        ts, ys = g.win.series(_MEM, self.now - OOM_TREND_S)
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
