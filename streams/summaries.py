"""Stage 1's task summaries: a task's closed buckets folded per summary interval into a TaskSummary.

Stage 2 reads the stats by name (``gpuwarden.streams.columns.CLASS_COLUMNS``); each is a mean
over the interval's buckets of the window column of the same name, except ``mem_peak_frac``:
the highest bucket maximum of memory used over memory total on any of the task's GPUs, and
``cap_clock_loss``: per bucket the highest of the task's GPUs (a synchronous job runs at its
slowest GPU's pace, so one capped GPU of eight costs the job its clock, not an eighth of it).
The cause columns (thermal cap, power brake, HW slowdown, remap pending, uncorrected ECC,
NVLink links down) are per bucket the highest too, and ``clock_frac``, ``power_limit_frac`` and
``pcie_link_frac`` (the PCIe link's bandwidth over the most its GPU and slot allow) the lowest:
the node's slowest GPU, which a job's ranks on other nodes wait for
(``gpuwarden.streams.straggler`` compares them across the job's nodes); ``pcie_gen`` and
``pcie_width`` are per bucket those of the task's slowest PCIe link there (the lowest bandwidth).
The label ``gpus`` names the task's GPU indices on the node.

``util_gpu`` leaves out buckets spent mostly inside SDK checkpoints (``checkpoint_begin`` to
``checkpoint_end``): the GPU idles while a checkpoint is written, and a class's baseline and the
window its tasks are judged over are both made of these stats, so both leave them out alike.
"""

from __future__ import annotations

from gpuwarden.contract import TaskSummary
from gpuwarden.streams.columns import GPU_INDEX, TASK_INDEX, link_gbs
from gpuwarden.streams.nodestate import NodeState, TaskState, TaskTotals
from gpuwarden.streams.windows import ClosedBucket

#: Means of the task's own columns, then of its GPUs' columns: the order ``stats`` are written in.
TASK_STATS = ("util_gpu", "step_time_s", "data_wait_share", "comm_share")
GPU_STATS = ("power_w", "temp_per_w", "tensor_active", "sm_active")
#: Per bucket the highest over the task's GPUs, then the mean over the interval's buckets.
GPU_MAX_STATS = ("cap_clock_loss", "thermal_cap", "power_brake", "hw_slowdown", "remap_pending",
                 "ecc_uncorrected", "nvlink_down")
#: Per bucket the lowest over the task's GPUs, then the mean over the interval's buckets.
GPU_MIN_STATS = ("clock_frac", "power_limit_frac", "pcie_link_frac")
#: Per bucket the generation and width of the task's slowest PCIe link, then the mean over the interval's buckets.
LINK_STATS = ("pcie_gen", "pcie_width")
_TASK_AT = tuple((k, TASK_INDEX[k]) for k in TASK_STATS)
_GPU_AT = tuple((k, GPU_INDEX[k]) for k in GPU_STATS)
_GPU_MAX_AT = tuple((k, GPU_INDEX[k]) for k in GPU_MAX_STATS)
_GPU_MIN_AT = tuple((k, GPU_INDEX[k]) for k in GPU_MIN_STATS)
_UTIL, _STEP = TASK_INDEX.util_gpu, TASK_INDEX.step_time_s
_MEM, _TOT = GPU_INDEX.mem_used_gib, GPU_INDEX.mem_total_gib
_GEN, _WIDTH = GPU_INDEX.pcie_gen, GPU_INDEX.pcie_width
#: Task labels a summary carries (stage 2's job labels).
LABELS = ("user", "project")


#: A bucket at least this share inside a checkpoint adds no ``util_gpu`` to its summary.
CHECKPOINT_BUCKET = 0.5


def fold(st: NodeState, task: TaskState, bucket: ClosedBucket, in_checkpoint: bool = False) -> None:
    """Fold one closed task bucket (and its GPUs' buckets of the same end) into the task's totals;
    ``in_checkpoint``: the bucket was mostly inside a checkpoint (its utilisation is left out)."""
    means = bucket.means
    if means[_UTIL] is None and means[_STEP] is None:
        return
    totals = task.totals
    totals.samples += 1
    for stat, at in _TASK_AT:
        if not (in_checkpoint and at == _UTIL):
            totals.add(stat, means[at])
    highest: dict[str, float] = {}
    lowest: dict[str, float] = {}
    slowest: tuple[float, float, float] | None = None  # (GB/s, generation, width) of the slowest link
    for i in task.gpus:
        gs = st.gpus.get(i)
        if gs is None or gs.win.last_end() != bucket.end:
            continue
        w = gs.win
        peak, total = w.latest(_MEM, use_max=True), w.latest(_TOT)
        if peak is not None and total:
            totals.mem_peak_frac = max(totals.mem_peak_frac or 0.0, peak / total)
        for stat, at in _GPU_AT:
            totals.add(stat, w.latest(at))
        for stat, at in _GPU_MAX_AT:
            v = w.latest(at)
            if v is not None and v >= highest.get(stat, v):
                highest[stat] = v
        for stat, at in _GPU_MIN_AT:
            v = w.latest(at)
            if v is not None and v <= lowest.get(stat, v):
                lowest[stat] = v
        gen, width = w.latest(_GEN), w.latest(_WIDTH)
        gbs = None if gen is None or width is None else link_gbs(gen, width)
        if gbs is not None and (slowest is None or gbs < slowest[0]):
            slowest = (gbs, gen, width)  # type: ignore[assignment]
    for stat, v in highest.items():
        totals.add(stat, v)
    for stat, v in lowest.items():
        totals.add(stat, v)
    if slowest is not None:
        totals.add("pcie_gen", slowest[1])
        totals.add("pcie_width", slowest[2])


def summarise(st: NodeState, t: float, window_s: float) -> list[TaskSummary]:
    """Every task's summary of the interval ending at ``t`` (tasks with no samples make none);
    the totals start again."""
    out = []
    for tid in sorted(st.tasks):
        task = st.tasks[tid]
        totals = task.totals
        task.totals = TaskTotals()
        if not totals.samples:
            continue
        stats = {}
        for stat in TASK_STATS + GPU_STATS + GPU_MAX_STATS + GPU_MIN_STATS + LINK_STATS:
            mean = totals.mean(stat)
            if mean is not None:
                stats[stat] = round(mean, 6)
        if totals.mem_peak_frac is not None:
            stats["mem_peak_frac"] = round(totals.mem_peak_frac, 6)
        labels = {k: v for k, v in task.labels.items() if k in LABELS}
        labels["gpus"] = ",".join(str(i) for i in sorted(task.gpus))
        if st.driver_version:
            labels["driver_version"] = st.driver_version
        if st.cuda_version:
            labels["cuda_version"] = st.cuda_version
        out.append(TaskSummary(ts=t, task=task.labels.get("task_class", "unknown"), task_id=tid,
                               node=st.node, window_s=window_s, samples=totals.samples,
                               gpus=len(task.gpus), stats=stats, labels=labels, simulated=st.simulated))
    return out
