"""The metric vocabulary rules may use, per scope, with units (for evidence and validation).

``series`` metrics are bucketed in event time (trend, threshold with aggregates,
deviation); ``scalar`` metrics are computed at evaluation (time to OOM, idle
card-hours, checkpoint release).
"""

from __future__ import annotations

from typing import NamedTuple

from gpuwarden.streams.columns import CLASS_COLUMNS, GPU_COLUMNS, GPU_DERIVED_COLUMNS, NODE_COLUMNS, TASK_COLUMNS, \
    TASK_DERIVED_COLUMNS, names


class Metric(NamedTuple):
    kind: str  # "series" | "scalar"
    unit: str
    doc: str


# Window row columns, in row order (declared with their sources in gpuwarden.streams.columns).
GPU_RAW = names(GPU_COLUMNS)
GPU_DERIVED = names(GPU_DERIVED_COLUMNS)  # appended at bucket close from the bucket means
TASK_ROW = names(TASK_COLUMNS)
TASK_DERIVED = names(TASK_DERIVED_COLUMNS)
NODE_ROW = names(NODE_COLUMNS)
CLASS_ROW = names(CLASS_COLUMNS)

_UNITS = {
    "util_gpu": "%", "mem_used_gib": "GiB", "mem_total_gib": "GiB", "temp_gpu_c": "°C",
    "power_w": "W", "power_limit_w": "W", "power_default_limit_w": "W", "clock_sm_mhz": "MHz", "clock_sm_max_mhz": "MHz",
    "headroom_gib": "GiB", "temp_per_w": "°C/W", "step_time_s": "s", "data_wait_s": "s",
    "comm_s": "s", "ecc_uncorrected": "errors", "remapped_rows": "rows", "pcie_gen": "generation",
    "pcie_width": "lanes",
}


def _series(names: tuple[str, ...]) -> dict[str, Metric]:
    return {n: Metric("series", _UNITS.get(n, "fraction"), "") for n in names}


SCOPES: dict[str, dict[str, Metric]] = {
    "gpu": {
        **_series(GPU_RAW + GPU_DERIVED),
        "time_to_oom_s": Metric("scalar", "s", "headroom / memory growth rate over the last 15, 10 or 5 min "
                                "(the longest rising steadily)"),
        "ckpt_released": Metric("scalar", "bool",
                                "1 if memory fell back to its pre-checkpoint level after the last "
                                "checkpoint_end within 30 min, 0 if it did not, absent without one"),
        "idle_hours": Metric("scalar", "h", "how long this allocated GPU has been idle under the task holding it"),
        "idle_s": Metric("scalar", "s", "idle_hours in seconds"),
        "capped_neighbours": Metric("scalar", "GPUs",
                                    "other GPUs of the node losing at least 5 % of their SM clock to a "
                                    "power or thermal cap in their newest bucket"),
    },
    "task": {
        **_series(TASK_ROW + TASK_DERIVED),
        "idle_card_hours": Metric("scalar", "card-h", "sum of the idle hours of the task's GPUs here"),
        "gpus": Metric("scalar", "GPUs", "GPUs the task holds on this node"),
        "idle_s": Metric("scalar", "s", "how long every GPU the task holds here has been idle under it "
                                        "(0 while one is busy)"),
    },
    "node": _series(NODE_ROW),
    "class": _series(CLASS_ROW),
    "job": {
        "version_skew": Metric("scalar", "versions",
                               "distinct driver/CUDA versions across the job's nodes, minus one"),
        "nodes": Metric("scalar", "nodes", "nodes the job reported from in the last 10 min"),
    },
    # One node of a multi-node job in its newest judged minute, against the job's other nodes
    # (streams/straggler.py); absent in a minute not judged (a node not busy, one node alone).
    "rank": {
        "straggler": Metric("scalar", "bool", "1 if the node holds the job back this minute: its slowest GPU's "
                            "clock or its tensor activity against its peers' moved past its usual ratio"),
        "clock_vs_peers": Metric("scalar", "ratio", "the node's slowest GPU's SM clock over the peers' median"),
        "clock_usual": Metric("scalar", "ratio", "clock_vs_peers usual for the node (1 until 10 minutes known)"),
        "tensor_vs_peers": Metric("scalar", "ratio", "the node's tensor activity over the peers' median"),
        "tensor_usual": Metric("scalar", "ratio", "tensor_vs_peers usual for the node (after 10 minutes)"),
        "power_vs_peers": Metric("scalar", "ratio", "the node's power over the peers' median"),
        "peers_comm_share": Metric("scalar", "fraction", "the peers' communication share of a step (SDK)"),
        "step_time_rise": Metric("scalar", "fraction", "the job's step time over its best recent minute, minus 1"),
        "nodes": Metric("scalar", "nodes", "nodes of the job in the judged minute"),
        "thermal_cap": Metric("scalar", "fraction", "share of the minute a GPU of the node was thermally capped"),
        "power_brake": Metric("scalar", "fraction", "share of the minute a GPU of the node had HW power brake "
                              "or HW slowdown set"),
        "power_limit_frac": Metric("scalar", "fraction", "the node's lowest power limit over its default"),
        "remap_pending": Metric("scalar", "fraction", "share of the minute a GPU of the node had a row remap pending"),
        "ecc_uncorrected": Metric("scalar", "errors", "uncorrected ECC errors of the node's worst GPU (volatile)"),
        "nvlink_down": Metric("scalar", "links", "NVLink links down on the node's worst GPU"),
        "pcie_vs_peers": Metric("scalar", "ratio", "the bandwidth of the node's slowest PCIe link over the "
                                "peers' median (generation and width as GB/s)"),
        "pcie_gen": Metric("scalar", "generation", "the PCIe generation of the node's slowest link"),
        "pcie_width": Metric("scalar", "lanes", "the PCIe width of the node's slowest link"),
        "peers_pcie_gen": Metric("scalar", "generation", "the peers' median PCIe generation of their slowest link"),
        "peers_pcie_width": Metric("scalar", "lanes", "the peers' median PCIe width of their slowest link"),
        "pcie_link_frac": Metric("scalar", "fraction", "the node's lowest PCIe link bandwidth over the most its "
                                 "GPU and slot allow (absent where the agent sends no maximum)"),
    },
}

