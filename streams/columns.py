"""The columns of every window row, declared once: name and source fields.

A window row is a plain tuple (the hot path appends one per GPU per snapshot). Its column
order, the metric names rules read (``gpuwarden.streams.metrics``) and the positions code
reads it at (``GPU_INDEX.power_w``) all come from the declarations here, so no code indexes a
row by a bare number. ``gpu_rows`` makes a GPU's values in the declared order, beside the
declarations; ``tests/streams/test_columns.py`` pins each column to its source.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import NamedTuple

from gpuwarden.clocks import HW_POWER_BRAKE, HW_SLOWDOWN, HW_THERMAL, SW_POWER_CAP, SW_THERMAL
from gpuwarden.contract import GpuColumns

_GIB = float(1 << 30)
#: An allocated GPU below this utilisation (%) counts as idle.
IDLE_UTIL = 5.0


class Column(NamedTuple):
    """One column of a row: the metric name and the input fields its value is made from."""

    name: str
    fields: tuple[str, ...]


class Derived(NamedTuple):
    """A column appended at bucket close from the bucket's means of two other columns."""

    name: str
    op: str  # "ratio": a / b (absent when b is absent or 0); "difference": a - b
    a: str
    b: str


class Positions(dict[str, int]):
    """Column name -> position in the row; also as attributes for code (``GPU_INDEX.power_w``)."""

    def __init__(self, columns: Sequence[Column | Derived]) -> None:
        super().__init__((c.name, i) for i, c in enumerate(columns))
        if len(self) != len(columns):
            raise ValueError(f"duplicate column names in {[c.name for c in columns]}")

    def __getattr__(self, name: str) -> int:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def names(columns: Sequence[Column | Derived]) -> tuple[str, ...]:
    return tuple(c.name for c in columns)


def deriver(positions: Positions, derived: Sequence[Derived]) -> Callable[[list], list]:
    """The function a window's ``close`` calls on a bucket's means for the ``derived`` columns."""
    steps = [(d.op == "ratio", positions[d.a], positions[d.b]) for d in derived]
    if any(d.op not in ("ratio", "difference") for d in derived):
        raise ValueError(f"unknown op in {derived}")

    def derive(means: list) -> list:
        out: list[float | None] = []
        for ratio, a, b in steps:
            x, y = means[a], means[b]
            if ratio:
                out.append(x / y if x is not None and y else None)
            else:
                out.append(x - y if x is not None and y is not None else None)
        return out
    return derive


# ------------------------------------------------------------------ GPU rows (one per GPU per snapshot)

#: The reasons (``gpuwarden.clocks``) that mean a power or thermal cap holds the clock down (not
#: idle, not app clocks).
CAP_REASONS = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE
THERMAL_REASONS = SW_THERMAL | HW_THERMAL


#: GB/s per lane and direction of each PCIe generation: the transfer rate (2.5, 5, 8, 16, 32, 64 GT/s)
#: after its line code (8b/10b to Gen2, 128b/130b Gen3-5, Gen6's FLIT carries 242 of 256 bytes).
PCIE_LANE_GBS = {1: 2.5 * 0.8 / 8, 2: 5 * 0.8 / 8, 3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8,
                 5: 32 * 128 / 130 / 8, 6: 64 * 242 / 256 / 8}


def link_gbs(gen: float, width: float) -> float | None:
    """A PCIe link's bandwidth (GB/s each way) at generation ``gen`` (a mean rounds to the nearest)
    and ``width`` lanes; None for a generation not in :data:`PCIE_LANE_GBS` or no lanes."""
    rate = PCIE_LANE_GBS.get(round(gen))
    return rate * width if rate and width else None


def link_share(gen: int | None, width: int | None, gen_max: int | None, width_max: int | None) -> float | None:
    """The link's bandwidth now over the most its GPU and slot allow (1.0: as trained at its best)."""
    if gen is None or width is None or gen_max is None or width_max is None:
        return None
    now, best = link_gbs(gen, width), link_gbs(gen_max, width_max)
    return now / best if now is not None and best else None


class _LinkShares(dict):
    """:func:`link_share` by (generation, width, max generation, max width), each combination computed
    once: a row pays a dict lookup, not two rate lookups and a division (a fleet has a few links;
    past ``LIMIT`` combinations they are computed each time)."""

    LIMIT = 4096

    def __missing__(self, key: tuple) -> float | None:
        value = link_share(*key)
        if len(self) < self.LIMIT:
            self[key] = value
        return value


LINK_SHARES = _LinkShares()


#: Fields are ``GpuSample``'s; ``owners`` is the snapshot's GPUs that a process holds. Each
#: reason column is 1.0 while its bits are set, 0.0 while not, absent without reasons;
#: ``cap_clock_loss`` is the share of the maximum SM clock lost while a cap reason is set, 0.0
#: while none is (idle clocks are no cap's cost): its window mean is what a cap cost.
GPU_COLUMNS = (
    Column("util_gpu", ("util_gpu",)),
    Column("mem_used_gib", ("mem_used_bytes",)),
    Column("mem_total_gib", ("mem_total_bytes",)),
    Column("temp_gpu_c", ("temp_gpu_c",)),
    Column("power_w", ("power_w",)),
    Column("power_limit_w", ("power_limit_w",)),
    Column("clock_sm_mhz", ("clock_sm_mhz",)),
    Column("clock_sm_max_mhz", ("clock_sm_max_mhz",)),
    Column("power_default_limit_w", ("power_default_limit_w",)),
    Column("hw_slowdown", ("clock_event_reasons",)),
    Column("hw_thermal", ("clock_event_reasons",)),
    Column("power_brake", ("clock_event_reasons",)),
    Column("sw_thermal", ("clock_event_reasons",)),
    Column("sw_power_cap", ("clock_event_reasons",)),
    Column("capped", ("clock_event_reasons",)),
    Column("thermal_cap", ("clock_event_reasons",)),
    Column("cap_clock_loss", ("clock_event_reasons", "clock_sm_mhz", "clock_sm_max_mhz")),
    Column("ecc_uncorrected", ("ecc_volatile_uncorrected",)),
    Column("remap_pending", ("remap_pending",)),
    Column("remap_failure", ("remap_failure",)),
    Column("allocated", ("index", "owners")),
    Column("idle_allocated", ("index", "owners", "util_gpu")),
    Column("present", ("util_gpu", "mem_used_bytes", "temp_gpu_c")),
    # GPM's tensor-pipe and SM activity (%, absent without GPM): a job against its own hour
    # (job-compute-fell-below-own-hour) and its ranks against each other (streams/straggler.py);
    # NVLink links down
    Column("tensor_active", ("tensor_active",)),
    Column("sm_active", ("sm_active",)),
    Column("nvlink_down", ("nvlink_down",)),
    # The PCIe link now, and its bandwidth over the most the GPU and its slot allow (absent where the
    # agent sends no maximum): a link that trained down holds a job's rank back (streams/straggler.py)
    Column("pcie_gen", ("pcie_gen",)),
    Column("pcie_width", ("pcie_width",)),
    Column("pcie_link_frac", ("pcie_gen", "pcie_width", "pcie_gen_max", "pcie_width_max")),
)
GPU_DERIVED_COLUMNS = (
    Derived("mem_used_frac", "ratio", "mem_used_gib", "mem_total_gib"),
    Derived("headroom_gib", "difference", "mem_total_gib", "mem_used_gib"),
    Derived("power_frac", "ratio", "power_w", "power_limit_w"),
    Derived("clock_frac", "ratio", "clock_sm_mhz", "clock_sm_max_mhz"),
    Derived("power_limit_frac", "ratio", "power_limit_w", "power_default_limit_w"),
    Derived("temp_per_w", "ratio", "temp_gpu_c", "power_w"),
)
GPU_INDEX = Positions(GPU_COLUMNS + GPU_DERIVED_COLUMNS)
#: The row of a GPU a snapshot no longer reports (absent, not present).
GPU_MISSING = tuple(0.0 if c.name == "present" else None for c in GPU_COLUMNS)


def gpu_rows(gpus: GpuColumns, owners: Container[int]) -> list[tuple]:
    """Every GPU's row from a snapshot's GPU table, its values in ``GPU_COLUMNS`` order: one
    tuple display per GPU, its reason bits tested once (a call per column or value costs the
    hot path ~8 %, a generic row builder ~5 %)."""
    rows = []
    for (index, util, used, total, temp, power, limit, sm, sm_max, default_limit, reasons, ecc, pending,
         failure, tensor, sm_active, nvlink, gen, width, gen_max, width_max) in zip(
            gpus.index, gpus.util_gpu, gpus.mem_used_bytes, gpus.mem_total_bytes, gpus.temp_gpu_c,
            gpus.power_w, gpus.power_limit_w, gpus.clock_sm_mhz, gpus.clock_sm_max_mhz,
            gpus.power_default_limit_w, gpus.clock_event_reasons, gpus.ecc_volatile_uncorrected,
            gpus.remap_pending, gpus.remap_failure, gpus.tensor_active, gpus.sm_active, gpus.nvlink_down,
            gpus.pcie_gen, gpus.pcie_width, gpus.pcie_gen_max, gpus.pcie_width_max):
        if reasons is None:
            slowdown = hw_thermal = brake = sw_thermal = power_cap = capped = thermal = loss = None
        else:
            slowdown = 1.0 if reasons & HW_SLOWDOWN else 0.0
            hw_thermal = 1.0 if reasons & HW_THERMAL else 0.0
            brake = 1.0 if reasons & HW_POWER_BRAKE else 0.0
            sw_thermal = 1.0 if reasons & SW_THERMAL else 0.0
            power_cap = 1.0 if reasons & SW_POWER_CAP else 0.0
            capped = 1.0 if reasons & CAP_REASONS else 0.0
            thermal = 1.0 if reasons & THERMAL_REASONS else 0.0
            loss = (None if sm is None or not sm_max else
                    max(0.0, 1.0 - sm / sm_max) if capped else 0.0)
        held = index in owners
        rows.append((
            util,
            None if used is None else used / _GIB,
            None if total is None else total / _GIB,
            temp, power, limit, sm, sm_max, default_limit,
            slowdown, hw_thermal, brake, sw_thermal, power_cap, capped, thermal, loss,
            ecc,
            None if pending is None else float(pending),
            None if failure is None else float(failure),
            1.0 if held else 0.0,  # allocated
            (1.0 if util < IDLE_UTIL else 0.0) if held and util is not None else 0.0,  # idle_allocated
            0.0 if util is None and used is None and temp is None else 1.0,  # present
            tensor, sm_active,
            None if nvlink is None else float(nvlink),
            gen, width,
            None if width_max is None else LINK_SHARES[gen, width, gen_max, width_max],  # pcie_link_frac
        ))
    return rows


def row_function(columns: Sequence[Column], *given: str) -> Callable[..., tuple]:
    """``row(**values)``: the row of ``columns`` holding the ``given`` columns' values (keyword
    arguments by column name, all required), absent elsewhere."""
    unknown = set(given) - {c.name for c in columns}
    if unknown:
        raise KeyError(f"not columns of this row: {sorted(unknown)}")
    order, wanted = names(columns), frozenset(given)

    def row(**values: float | None) -> tuple:
        if values.keys() != wanted:
            raise TypeError(f"a row of {sorted(wanted)} given {sorted(values)}")
        return tuple(map(values.get, order))
    return row


# ------------------------------------------------------------------ task, node and class rows

#: Fields are a step ``TaskMetric``'s, and ``gpu.util_gpu``: the mean over the task's GPUs of
#: their newest bucket, appended at each bucket close.
TASK_COLUMNS = (
    Column("step_time_s", ("step_time_s",)),
    Column("data_wait_s", ("data_wait_s",)),
    Column("comm_s", ("comm_s",)),
    Column("util_gpu", ("gpu.util_gpu",)),
)
TASK_DERIVED_COLUMNS = (
    Derived("data_wait_share", "ratio", "data_wait_s", "step_time_s"),
    Derived("comm_share", "ratio", "comm_s", "step_time_s"),
)
TASK_INDEX = Positions(TASK_COLUMNS + TASK_DERIVED_COLUMNS)


#: Counted at each bucket close over the node's GPUs (their ``present`` column).
NODE_COLUMNS = (Column("gpus_present", ("gpu.present",)), Column("gpus_missing", ("gpu.present",)))
NODE_INDEX = Positions(NODE_COLUMNS)

#: Fields are ``TaskSummary.stats`` keys (see ``gpuwarden.streams.summaries``).
CLASS_COLUMNS = tuple(Column(k, (k,)) for k in ("util_gpu", "mem_peak_frac", "step_time_s", "power_w",
                                               "temp_per_w", "data_wait_share", "comm_share",
                                               "cap_clock_loss", "sm_active", "tensor_active"))
CLASS_INDEX = Positions(CLASS_COLUMNS)
