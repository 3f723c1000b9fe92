"""The metric vocabulary rules may use, per scope, with units (for evidence and validation).

``series`` metrics are bucketed in event time (trend, threshold with aggregates,
deviation); ``scalar`` metrics are computed at evaluation (time to OOM, idle
card-hours, checkpoint release).
"""

from __future__ import annotations

from typing import NamedTuple


class Metric(NamedTuple):
    kind: str  # "series" | "scalar"
    unit: str
    doc: str


# Order of the raw per-sample GPU row; gpuwarden.streams.nodestage builds rows in this order.
GPU_RAW = (
    "util_gpu", "mem_used_gib", "mem_total_gib", "temp_gpu_c", "power_w", "power_limit_w",
    "clock_sm_mhz", "clock_sm_max_mhz", "hw_slowdown", "hw_thermal", "power_brake", "sw_thermal",
    "ecc_uncorrected", "remap_pending", "remap_failure", "allocated", "idle_allocated", "present",
)
# Appended at bucket close from the bucket means.
GPU_DERIVED = ("mem_used_frac", "headroom_gib", "power_frac", "clock_frac", "temp_per_w")
TASK_ROW = ("step_time_s", "data_wait_s", "comm_s", "util_gpu")
TASK_DERIVED = ("data_wait_share", "comm_share")
NODE_ROW = ("gpus_present", "gpus_missing")
CLASS_ROW = ("util_gpu", "mem_peak_frac", "step_time_s", "power_w", "temp_per_w",
             "data_wait_share", "comm_share")

_UNITS = {
    "util_gpu": "%", "mem_used_gib": "GiB", "mem_total_gib": "GiB", "temp_gpu_c": "°C",
    "power_w": "W", "power_limit_w": "W", "clock_sm_mhz": "MHz", "clock_sm_max_mhz": "MHz",
    "headroom_gib": "GiB", "temp_per_w": "°C/W", "step_time_s": "s", "data_wait_s": "s",
    "comm_s": "s", "ecc_uncorrected": "errors", "remapped_rows": "rows",
}


def _series(names: tuple[str, ...]) -> dict[str, Metric]:
    return {n: Metric("series", _UNITS.get(n, "fraction"), "") for n in names}


SCOPES: dict[str, dict[str, Metric]] = {
    "gpu": {
        **_series(GPU_RAW + GPU_DERIVED),
        "time_to_oom_s": Metric("scalar", "s", "headroom / memory growth rate over the last 15 min"),
        "ckpt_released": Metric("scalar", "bool",
                                "1 if memory fell back to its pre-checkpoint level after the last "
                                "checkpoint_end within 30 min, 0 if it did not, absent without one"),
        "idle_hours": Metric("scalar", "h", "how long this allocated GPU has been idle"),
    },
    "task": {
        **_series(TASK_ROW + TASK_DERIVED),
        "idle_card_hours": Metric("scalar", "card-h", "sum of the idle hours of the task's GPUs here"),
        "gpus": Metric("scalar", "GPUs", "GPUs the task holds on this node"),
    },
    "node": _series(NODE_ROW),
    "class": _series(CLASS_ROW),
    "job": {
        "version_skew": Metric("scalar", "versions",
                               "distinct driver/CUDA versions across the job's nodes, minus one"),
        "nodes": Metric("scalar", "nodes", "nodes the job reported from in the last 10 min"),
    },
}


def index(names: tuple[str, ...]) -> dict[str, int]:
    return {n: i for i, n in enumerate(names)}


GPU_INDEX = index(GPU_RAW + GPU_DERIVED)
TASK_INDEX = index(TASK_ROW + TASK_DERIVED)
NODE_INDEX = index(NODE_ROW)
CLASS_INDEX = index(CLASS_ROW)
