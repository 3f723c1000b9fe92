"""The wire contract: one pydantic model per topic record, in one place.

Every record carries ``schema`` ("<kind>/<major>"), which doubles as the type
tag when records of several kinds share a file (replay, export). Within a major
version a record may carry fields a reader does not know (a newer agent than its
workers): they are ignored and counted (:func:`unknown_fields`), never fatal. A
change that old readers would misread bumps the major version; a reader rejects a
major version it does not know, saying which ones it reads.

Validation is strict on purpose: a NaN, a negative counter or a timestamp from
the far future poisons baselines for days, so such records are rejected at the
boundary (and sent to a dead-letter topic by the stream workers) instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from operator import attrgetter
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

#: Default limits applied by :func:`decode`; workers take them from config.
DEFAULT_MAX_RECORD_BYTES = 1 << 20
DEFAULT_MAX_FUTURE_SKEW_S = 300.0
#: How far behind the clock (at live boundaries) or its node's newest record a record may be
#: dated: a node booting with its clock reset (1970) before NTP syncs must not set alerts.
DEFAULT_MAX_PAST_SKEW_S = 7 * 86400.0

NonNegInt = Annotated[int, Field(ge=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
Percent = Annotated[float, Field(ge=0, le=100)]
Label = Annotated[str, Field(max_length=256)]
Text = Annotated[str, Field(max_length=4096)]
Timestamp = Annotated[float, Field(ge=0, description="event time, UTC epoch seconds")]


class Wire(BaseModel):
    """Base of every contract model: strict numbers; unknown fields are kept aside (in
    ``model_extra``) for :func:`unknown_fields` to count, and otherwise ignored."""

    model_config = ConfigDict(
        allow_inf_nan=False,
        extra="allow",
        populate_by_name=True,
        serialize_by_alias=True,
        frozen=False,
    )


class _TimedRecord(Wire):
    """A top-level record with an event timestamp checked against the clock."""

    ts: Timestamp

    @field_validator("ts")
    @classmethod
    def _plausible(cls, v: float, info: ValidationInfo) -> float:
        ctx = info.context or {}
        now = ctx.get("now")
        if now is None:
            return v
        skew = ctx.get("max_future_skew_s", DEFAULT_MAX_FUTURE_SKEW_S)
        if v > now + skew:
            raise ValueError(
                f"timestamp {v:.3f} is {v - now:.0f} s in the future (allowed skew {skew:.0f} s)"
            )
        past = ctx.get("max_past_skew_s")
        if past is not None and v < now - past:
            raise ValueError(
                f"timestamp {v:.3f} is {now - v:.0f} s in the past (allowed {past:.0f} s, "
                "limits.max_past_skew): a clock not yet synced?"
            )
        return v


# --------------------------------------------------------------------------- gpu.samples


class GpuSample(Wire):
    """One GPU at one tick. A field the GPU does not support is ``None``, never 0."""

    index: NonNegInt
    uuid: Label
    name: Label | None = None
    mig_mode: bool | None = None
    util_gpu: Percent | None = None
    util_memory: Percent | None = None
    # GPM activity (Hopper+), 0-100, sampled on the slow cadence.
    sm_active: Percent | None = None
    sm_occupancy: Percent | None = None
    tensor_active: Percent | None = None
    dram_active: Percent | None = None
    mem_used_bytes: NonNegInt | None = None
    mem_total_bytes: NonNegInt | None = None
    mem_reserved_bytes: NonNegInt | None = None
    temp_gpu_c: float | None = Field(default=None, ge=-50, le=200)
    temp_memory_c: float | None = Field(default=None, ge=-50, le=200)
    power_w: NonNegFloat | None = None
    power_limit_w: NonNegFloat | None = None
    """The enforced power limit (what the card may draw now)."""
    power_default_limit_w: NonNegFloat | None = None
    """The board's default power limit: an enforced limit below it was lowered on purpose."""
    energy_mj: NonNegInt | None = None
    clock_sm_mhz: NonNegInt | None = None
    clock_mem_mhz: NonNegInt | None = None
    clock_sm_max_mhz: NonNegInt | None = None
    clock_event_reasons: NonNegInt | None = None
    clock_event_names: list[Label] = Field(default_factory=list)
    pstate: int | None = Field(default=None, ge=0, le=32)
    ecc_volatile_corrected: NonNegInt | None = None
    ecc_volatile_uncorrected: NonNegInt | None = None
    ecc_aggregate_corrected: NonNegInt | None = None
    ecc_aggregate_uncorrected: NonNegInt | None = None
    remapped_rows_corrected: NonNegInt | None = None
    remapped_rows_uncorrected: NonNegInt | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    pcie_gen: NonNegInt | None = None
    pcie_width: NonNegInt | None = None
    pcie_gen_max: NonNegInt | None = None
    """The highest PCIe generation possible with this GPU in this system (NVML's
    ``nvmlDeviceGetMaxPcieLinkGeneration``: a Gen2 device on a Gen1 bus reports 1); ``pcie_gen``
    below it under load is a link that trained down."""
    pcie_width_max: NonNegInt | None = None
    """The widest PCIe link possible with this GPU in this system (``nvmlDeviceGetMaxPcieLinkWidth``:
    an x16 device on an x8 bus reports 8); ``pcie_width`` below it is a link that trained narrower."""
    pcie_replay_counter: NonNegInt | None = None
    nvlink_up: NonNegInt | None = None
    nvlink_down: NonNegInt | None = None
    fan_pct: Percent | None = None


class GpuProcess(Wire):
    """A process holding a GPU, attributed node → GPU → process/container → user."""

    pid: NonNegInt
    gpu_index: NonNegInt
    gpu_uuid: Label | None = None
    used_memory_bytes: NonNegInt | None = None
    uid: NonNegInt | None = None
    user: Label | None = None
    container_id: Label | None = None
    pod_uid: Label | None = None
    pod_name: Label | None = None
    pod_namespace: Label | None = None
    slurm_job_id: Label | None = None
    task: Label | None = Field(default=None, description="task class label")
    task_id: Label | None = Field(default=None, description="this run of the task")
    project: Label | None = None
    command: Text | None = None


class _Columns(Wire):
    """A table of rows sent as columns, one JSON array per row field (``node_snapshot/2``):
    a field's name travels once per record instead of once per row, and a consumer gets
    the table without a Python object per row. Decoding an 8-GPU snapshot this way takes
    ~35 µs instead of ~53 µs (the worker's largest single cost; bench/snapshot_decode.py), and
    the record is ~4.7 kB instead of ~10 kB. The row model (:class:`GpuSample`,
    :class:`GpuProcess`) stays the one definition of each field; a column validates its
    values exactly as the row model would. A column left out means the row default
    (``null``) for every row; in memory every column is a full list."""

    ROW: ClassVar[type[Wire]]
    MAX_ROWS: ClassVar[int]
    #: The row fields in order; the first is required and gives the row count.
    NAMES: ClassVar[tuple[str, ...]]
    #: Per optional field, (default factory, default): what a left-out column holds per row.
    FILL: ClassVar[dict[str, tuple[Any, Any]]]

    @model_validator(mode="after")
    def _same_length(self) -> "_Columns":
        d = self.__dict__
        n = len(d[self.NAMES[0]])
        if None not in d.values() and set(map(len, d.values())) == {n}:
            return self  # the usual case, checked without a Python loop
        for name in self.NAMES:
            col = d[name]
            if col is None:  # left out (a required column cannot be): the row default
                factory, default = self.FILL[name]
                d[name] = [factory() for _ in range(n)] if factory else [default] * n
            elif len(col) != n:
                raise ValueError(f"{name}: {len(col)} values, {self.NAMES[0]} has {n}")
        return self

    @classmethod
    def of(cls, rows: "list[Any]") -> "Any":
        """The table of ``rows`` (row-model instances, or dicts validated as rows)."""
        if len(rows) > cls.MAX_ROWS:
            raise ValueError(f"{len(rows)} rows exceed the limit of {cls.MAX_ROWS}")
        row = cls.ROW
        values = map(attrgetter(*cls.NAMES), [r if type(r) is row else row.model_validate(r) for r in rows])
        columns = zip(*values) if rows else ((),) * len(cls.NAMES)  # transposed in C
        return cls.model_construct(**{name: list(col) for name, col in zip(cls.NAMES, columns)})

    def rows(self) -> "list[Any]":
        """One row-model object per row (built without validation: the columns were)."""
        d, make = self.__dict__, self.ROW.model_construct
        names = self.NAMES
        return [make(**dict(zip(names, values))) for values in zip(*(d[n] for n in names))]

    def __len__(self) -> int:
        return len(self.__dict__[self.NAMES[0]])


def _columns(name: str, row: type[Wire], max_rows: int) -> type[_Columns]:
    """The column table of ``row``: each row field as a list of that field's type."""
    fields: dict[str, Any] = {}
    for fname, f in row.model_fields.items():
        item = Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation
        column = Annotated[list[item], Field(max_length=max_rows)]  # type: ignore[valid-type]
        fields[fname] = (column, ...) if f.is_required() else (column | None, None)
    table = create_model(name, __base__=_Columns, __doc__=f"{row.__name__} rows as columns.",
                         __module__=__name__, **fields)
    table.ROW, table.MAX_ROWS, table.NAMES = row, max_rows, tuple(fields)
    table.FILL = {n: (f.default_factory, f.default) for n, f in row.model_fields.items() if not f.is_required()}
    return table


#: ``gpus`` of a ``node_snapshot/2``: :class:`GpuSample` fields as columns, ≤ 64 GPUs.
GpuColumns = _columns("GpuColumns", GpuSample, 64)
#: ``processes`` of a ``node_snapshot/2``: :class:`GpuProcess` fields as columns.
ProcessColumns = _columns("ProcessColumns", GpuProcess, 4096)


class _SnapshotHead(_TimedRecord):
    """The fields every version of a node snapshot has."""

    schema_: str = Field(alias="schema")  # each version narrows it (and it stays second on the wire)
    node: Label
    seq: NonNegInt
    boot_id: Label
    agent_version: Label
    driver_version: Label | None = None
    cuda_version: Label | None = None
    interval_s: NonNegFloat | None = None
    simulated: bool = False
    """Made by the simulator, not read from hardware: the engine marks alerts from such records
    ``simulated=true`` and the notifiers send those only to receivers with ``accept_simulated``."""


class NodeSnapshot(_SnapshotHead):
    """gpu.samples, key ``node``: every GPU and GPU process of one node at one tick.

    ``gpus`` and ``processes`` are column tables (:class:`_Columns`): ``snap.gpus.util_gpu[i]``
    is GPU row ``i``; ``snap.gpus.rows()`` gives :class:`GpuSample` objects; :meth:`of` builds
    one from rows."""

    schema_: Literal["node_snapshot/2"] = Field(default="node_snapshot/2", alias="schema")
    gpus: GpuColumns = Field(default_factory=lambda: GpuColumns.of([]))  # type: ignore[valid-type]
    processes: ProcessColumns = Field(default_factory=lambda: ProcessColumns.of([]))  # type: ignore[valid-type]

    @classmethod
    def of(cls, *, gpus: "list[Any]" = (), processes: "list[Any]" = (), **head: Any) -> "NodeSnapshot":  # type: ignore[assignment]
        """A snapshot from rows (:class:`GpuSample`/:class:`GpuProcess` objects, or dicts), as an
        agent builds one. Not an ``__init__`` or a validator that takes rows: either makes
        pydantic hand every decoded table to Python first (54 µs per 8-GPU record, not 35)."""
        return cls(gpus=GpuColumns.of(list(gpus)), processes=ProcessColumns.of(list(processes)), **head)


# --------------------------------------------------------------------------- gpu.events


class EventKind(StrEnum):
    XID = "xid"
    SXID = "sxid"
    ECC_SBE = "ecc_sbe"
    ECC_DBE = "ecc_dbe"
    ROW_REMAP = "row_remap"
    GPU_LOST = "gpu_lost"
    DRIVER = "driver"
    CLOCK_EVENT = "clock_event"
    PCIE_REPLAY = "pcie_replay"
    AGENT = "agent"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    FATAL = "fatal"


class CatalogueEntry(Wire):
    """What the XID catalogue says about a code."""

    code: int
    meaning: Text
    action: Label
    severity: Severity


class GpuEvent(_TimedRecord):
    """gpu.events, key ``node``: one discrete hardware, driver or agent event."""

    schema_: Literal["gpu_event/1"] = Field(default="gpu_event/1", alias="schema")
    node: Label
    seq: NonNegInt
    boot_id: Label
    kind: EventKind
    source: Literal["nvml", "kmsg", "counter", "agent", "sim"]
    gpu_index: NonNegInt | None = None
    gpu_uuid: Label | None = None
    pci_bus_id: Label | None = None
    code: int | None = None
    count: NonNegInt = 1
    message: Text = ""
    catalogue: CatalogueEntry | None = None
    simulated: bool = False
    """Made by the simulator (see ``NodeSnapshot.simulated``)."""
    recovery_action: Label | None = None
    """What the driver asks for (NVML's ``NVML_GPU_RECOVERY_ACTION_*`` name without the prefix:
    ``GPU_RESET``, ``NODE_REBOOT``, ``DRAIN_P2P``, ``DRAIN_AND_RESET``, ...), read with XID 154 on
    drivers that report it (R610+ per NVIDIA's XID catalogue); None where unknown. Optional within gpu_event/1: older readers ignore it."""


# --------------------------------------------------------------------------- task.metrics


class TaskMetricKind(StrEnum):
    STEP = "step"
    CHECKPOINT_BEGIN = "checkpoint_begin"
    CHECKPOINT_END = "checkpoint_end"
    OOM = "oom"
    EXIT = "exit"
    THROUGHPUT = "throughput"
    TTFT = "ttft"
    LATENCY = "latency"
    MODEL = "model"
    """What the task trains or serves: its parameter count (and shape), for model FLOPs (MFU)."""


class ModelMode(StrEnum):
    """What a task does with its model (a ``model`` metric's ``model_mode``): its FLOPs per token."""

    TRAIN = "train"
    SERVE = "serve"


class TaskMetric(_TimedRecord):
    """One task metric as the agent collects it and the engine reads it: what the training or
    inference code said about itself, on the node it runs on.

    Not a record of its own on the wire: the agent publishes a node's metrics of one tick as
    one :class:`TaskMetrics` batch (a Kafka record costs a stream worker far more than an item
    of a batch, and there are ~2.5 metrics per snapshot). ``task_metric/1`` tags it where the
    engine keeps it (a node's reorder buffer in its state envelope)."""

    schema_: Literal["task_metric/1"] = Field(default="task_metric/1", alias="schema")
    node: Label
    task: Label
    task_id: Label
    kind: TaskMetricKind
    pid: NonNegInt | None = None
    uid: NonNegInt | None = None
    step: NonNegInt | None = None
    step_time_s: NonNegFloat | None = None
    data_wait_s: NonNegFloat | None = None
    comm_s: NonNegFloat | None = None
    throughput: NonNegFloat | None = None
    throughput_unit: Label | None = None
    ttft_s: NonNegFloat | None = None
    latency_s: NonNegFloat | None = None
    exit_code: int | None = None
    message: Text = ""
    model_params: NonNegFloat | None = Field(default=None, description="parameters (kind model)")
    model_layers: NonNegInt | None = None
    model_hidden: NonNegInt | None = Field(default=None, description="hidden size (d_model)")
    model_seq_len: NonNegInt | None = None
    model_mode: ModelMode | None = Field(default=None, description="train or serve (kind model); unset: train, "
                                         "or serve for a task that reports ttft or latency")
    simulated: bool = False
    """Made by the simulator (see ``NodeSnapshot.simulated``)."""


#: Fields of a :class:`TaskMetric` its batch holds for all its items.
_BATCH_HELD = ("schema_", "node", "simulated")
#: One metric inside a :class:`TaskMetrics` batch: a :class:`TaskMetric`'s fields but the
#: batch's (its ``ts`` checked like any record's).
TaskMetricItem = create_model(
    "TaskMetricItem", __base__=_TimedRecord, __doc__="One task metric inside a ``task_metrics/1`` batch.",
    **{name: (f.annotation, f) for name, f in TaskMetric.model_fields.items() if name not in (*_BATCH_HELD, "ts")})


#: Items in one batch at most: a busy tick's metrics go in several (a batch stays far below
#: ``limits.max_record_bytes``: ~400 bytes an item).
MAX_BATCH_ITEMS = 512


class TaskMetrics(Wire):
    """task.metrics, key ``node``: one node's task metrics of one agent tick, in the order sent.

    Keyed by node (the design first said task id): the node agent publishes them, and
    stage 1 joins them with the node's snapshots, so on the node's partition they need
    no re-keying hop and a worker sees every input of a node it owns (deterministic
    takeovers). Each item keeps its own event time (``ts``); the batch's :attr:`ts` is its
    earliest, where range reads (spool, export) find it. Readers apply the items one by
    one (:meth:`unpack`); a stream worker dead-letters a bad item alone and applies the
    others (docs/streams-kafka.md)."""

    schema_: Literal["task_metrics/1"] = Field(default="task_metrics/1", alias="schema")
    node: Label
    simulated: bool = False
    """Made by the simulator (see ``NodeSnapshot.simulated``)."""
    metrics: list[TaskMetricItem] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)  # type: ignore[valid-type]

    @property
    def ts(self) -> float:
        return min(m.ts for m in self.metrics)

    def unpack(self) -> list[TaskMetric]:
        """The items as the engine reads them, with the batch's node and flag. Already validated,
        so each is built as pydantic's ``model_copy`` of a template with every field put in
        would build it (same fields, in the same order, the same fields set), without its
        per-field loop: ~1 µs an item, where ``model_copy`` took 5-8 and ``model_construct`` 12
        (a stream worker does this for every metric: 6 % of its CPU on the (b+) backlog of
        bench/streams_throughput.py)."""
        held = {"node": self.node, "simulated": self.simulated}
        template, new, put = _UNPACKED.__dict__, TaskMetric.__new__, object.__setattr__
        out = []
        for m in self.metrics:
            t = new(TaskMetric)
            put(t, "__dict__", {**template, **m.__dict__, **held})
            put(t, "__pydantic_extra__", {})
            put(t, "__pydantic_fields_set__", set(_UNPACKED_SET))
            put(t, "__pydantic_private__", None)
            out.append(t)
        return out

    @classmethod
    def of(cls, metrics: list[TaskMetric]) -> TaskMetrics:
        """One batch of ``metrics`` (one node's, one ``simulated`` flag)."""
        head = metrics[0]
        return cls.model_construct(node=head.node, simulated=head.simulated,
                                   metrics=[TaskMetricItem.model_construct(**_item_fields(m)) for m in metrics])


_ITEM_FIELDS = tuple(TaskMetricItem.model_fields)
#: What :meth:`TaskMetrics.unpack` copies (every field but ``schema`` is replaced).
_UNPACKED = TaskMetric(node="-", ts=0.0, task="-", task_id="-", kind=TaskMetricKind.STEP)
#: The fields an unpacked item has set: the template's and every one put in.
_UNPACKED_SET = frozenset({*_UNPACKED.model_fields_set, *_ITEM_FIELDS, "node", "simulated"})


def _item_fields(m: TaskMetric) -> dict[str, Any]:
    return {name: getattr(m, name) for name in _ITEM_FIELDS}


def batch_task_metrics(records: Iterable[Any]) -> Iterator[Any]:
    """``records`` as they go on the wire: each node's task metrics between two of its other
    records (an agent tick's) become one :class:`TaskMetrics`, placed before the node's next
    record (at the end for the last), so every node's own order is kept."""
    held: dict[tuple[str, bool], list[TaskMetric]] = {}
    for r in records:
        if type(r) is TaskMetric:
            key = (r.node, r.simulated)
            batch = held.setdefault(key, [])
            batch.append(r)
            if len(batch) == MAX_BATCH_ITEMS:
                yield TaskMetrics.of(held.pop(key))
            continue
        node = getattr(r, "node", None)
        if held and node is not None:
            for key in [k for k in held if k[0] == node]:
                yield TaskMetrics.of(held.pop(key))
        yield r
    for batch in held.values():
        yield TaskMetrics.of(batch)


def unbatch(records: Iterable[Any]) -> Iterator[Any]:
    """What readers apply: each :class:`TaskMetrics` as its items, every other record as is."""
    for r in records:
        if type(r) is TaskMetrics:
            yield from r.unpack()
        else:
            yield r


# --------------------------------------------------------------------------- task.summaries


class TaskSummary(_TimedRecord):
    """task.summaries, key task class: one task's per-window aggregates for the baselines."""

    schema_: Literal["task_summary/1"] = Field(default="task_summary/1", alias="schema")
    task: Label
    task_id: Label
    node: Label
    window_s: NonNegFloat
    samples: NonNegInt
    gpus: NonNegInt
    stats: dict[Label, float] = Field(default_factory=dict, max_length=64)
    labels: dict[Label, Label] = Field(
        default_factory=dict, max_length=32,
        description="who and where (user, project, driver_version, cuda_version) for stage-2 rules",
    )
    simulated: bool = False
    """Summed from simulated records (see ``NodeSnapshot.simulated``)."""


class StageProgress(Wire):
    """task.summaries, sent to *every* partition (key ``progress:<partition>``, Kafka header
    ``gw-progress``): how far stage 1 has got on one of its input partitions. Stage 1 sends it
    after the summaries it covers, on the same partitions, so a stage-2 worker that reads it
    has read every summary from that input partition up to ``watermark``; it releases a task
    class's summaries once every input partition has passed them (a watermark). Without it,
    stage 2 could only wait for nodes it had already heard from.

    The scheduler stage sends the same record on ``scheduler.allocations`` (to every partition,
    key ``progress:<partition>``, the same header) behind its job allocations: ``partition`` is a
    ``scheduler.jobs`` partition, ``watermark`` its last poll closed over its clusters, ``nodes``
    the clusters it holds there; stage 1 judges allocation-dependent rules only that far."""

    schema_: Literal["stage_progress/1"] = Field(default="stage_progress/1", alias="schema")
    partition: NonNegInt = Field(description="the stage-1 input partition (gpu.samples, gpu.events, task.metrics)")
    watermark: Timestamp | None = Field(
        description="every summary from that partition with ts <= this was sent before; None: no node read yet")
    catching_up: bool = Field(description="its inputs are behind (a backlog): wait for it up to max_source_skew")
    nodes: NonNegInt = Field(description="nodes stage 1 holds for it; 0 and caught up: nothing to wait for")


# --------------------------------------------------------------------------- scheduler.jobs


class JobState(StrEnum):
    """A job's state, one vocabulary for Slurm and Kubernetes (the scheduler's own word is
    kept in ``reason`` where it says more)."""

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    PREEMPTED = "preempted"
    NODE_FAIL = "node_fail"
    OUT_OF_MEMORY = "out_of_memory"
    UNKNOWN = "unknown"


class _SchedulerRecord(_TimedRecord):
    """The fields every ``scheduler.jobs`` and ``scheduler.allocations`` record has."""

    simulated: bool = False
    """Made by the simulator (cluster ``sim``), not read from a scheduler: the scheduler stage marks
    its alerts and allocations so, and the notifiers send those only to receivers with
    ``accept_simulated`` (as ``NodeSnapshot.simulated``)."""


class SchedulerJob(_SchedulerRecord):
    """scheduler.jobs, key cluster: one job as the scheduler showed it at ``ts`` (one poll).
    A poll's jobs and nodes are followed by its :class:`SchedulerPoll`, so a reader knows the
    whole queue at that moment (a job missing from it has left the scheduler's view)."""

    schema_: Literal["scheduler_job/1"] = Field(default="scheduler_job/1", alias="schema")
    cluster: Label
    scheduler: Literal["slurm", "kubernetes"]
    job_id: Label
    name: Label = ""
    user: Label = ""
    account: Label = Field(default="", description="Slurm account, or the pod's namespace")
    queue: Label = Field(default="", description="Slurm partition, or the pod's scheduler queue")
    state: JobState
    reason: Label = Field(default="", description="why it waits or ended: Resources, Priority, Unschedulable, ...")
    submit_time: Timestamp | None = None
    eligible_time: Timestamp | None = None
    start_time: Timestamp | None = None
    end_time: Timestamp | None = Field(default=None, description="when it ended; None while it has not")
    gpus: NonNegInt = Field(default=0, description="GPUs requested, all nodes together")
    gpu_type: Label = ""
    nodes: list[Label] = Field(default_factory=list, max_length=4096)
    gpu_indices: dict[Label, list[NonNegInt]] = Field(
        default_factory=dict, max_length=4096, description="allocated GPU indices per node")
    restarts: NonNegInt = Field(default=0, description="requeues (Slurm) or container restarts (Kubernetes)")
    exit_code: int | None = None


class NodeCapacity(_SchedulerRecord):
    """scheduler.jobs, key cluster: one node's GPUs as the scheduler counted them at ``ts``."""

    schema_: Literal["node_capacity/1"] = Field(default="node_capacity/1", alias="schema")
    cluster: Label
    scheduler: Literal["slurm", "kubernetes"]
    node: Label
    partitions: list[Label] = Field(default_factory=list, max_length=256)
    state: Label = Field(default="", description="the scheduler's word: idle, mixed, allocated, drain, down, ...")
    gpu_type: Label = ""
    gpus_total: NonNegInt = 0
    gpus_allocated: NonNegInt = 0


class SchedulerPoll(_SchedulerRecord):
    """scheduler.jobs, key cluster: the end of one poll (``ts`` as its records'), with how many
    jobs and nodes it sent; ``error`` when the scheduler did not answer (then none were sent)."""

    schema_: Literal["scheduler_poll/1"] = Field(default="scheduler_poll/1", alias="schema")
    cluster: Label
    scheduler: Literal["slurm", "kubernetes"]
    jobs: NonNegInt = 0
    nodes: NonNegInt = 0
    error: Text = ""


class SchedulerRepeat(_SchedulerRecord):
    """scheduler.jobs in the spool only, never on Kafka: the jobs and nodes of a poll that the
    spool did not store again, since nothing but ``ts`` changed from their last stored record
    (``gpuwarden.schedpolls``). Stored before the poll's changed records; ``at`` gives each
    one's place among the poll's records (``jobs`` then ``nodes``), so a reader puts the whole
    poll back in its order."""

    schema_: Literal["scheduler_repeat/1"] = Field(default="scheduler_repeat/1", alias="schema")
    cluster: Label
    scheduler: Literal["slurm", "kubernetes"]
    jobs: list[Label] = Field(default_factory=list, max_length=1 << 16)
    nodes: list[Label] = Field(default_factory=list, max_length=1 << 16)
    at: list[NonNegInt] = Field(default_factory=list, max_length=1 << 17)


class JobAllocation(_SchedulerRecord):
    """scheduler.allocations, key node: the GPUs of this node one job holds, as the scheduler
    stage learnt them from a poll (``released``: the job no longer holds any here). Stage 1,
    which has the GPUs' utilization, joins them with its samples: "8 allocated, 2 busy"."""

    schema_: Literal["job_allocation/1"] = Field(default="job_allocation/1", alias="schema")
    cluster: Label
    node: Label
    job_id: Label
    user: Label = ""
    account: Label = ""
    queue: Label = ""
    gpus: list[NonNegInt] = Field(default_factory=list, max_length=4096,
                                  description="GPU indices on this node; empty with ``count``: not known")
    count: NonNegInt = Field(default=0, description="GPUs the job holds on this node")
    released: bool = False


# --------------------------------------------------------------------------- inference.metrics


class HistogramDelta(Wire):
    """One latency histogram series over one scrape interval: what was observed between the
    previous scrape and this one, per bucket (not cumulative, as the server exposes it), so a
    reader sums records over any window without knowing the server's start."""

    name: Label = Field(description="what it measures, in our words: ttft, itl, e2e, queue")
    metric: Label = Field(description="the serving engine's own metric name")
    labels: dict[Label, Label] = Field(default_factory=dict, max_length=32)
    bounds: list[float] = Field(max_length=256, description="finite upper bounds (le), ascending, seconds")
    counts: list[NonNegInt] = Field(
        max_length=257, description="observations per bucket in the interval; one more than bounds: the last is above the highest bound")
    count: NonNegInt
    sum: NonNegFloat = Field(description="sum of the interval's observations, seconds")
    reset: bool = Field(default=False, description="the server restarted in the interval: counts since its start")

    @model_validator(mode="after")
    def _shape(self) -> "HistogramDelta":
        if len(self.counts) != len(self.bounds) + 1:
            raise ValueError(f"counts: {len(self.counts)} values for {len(self.bounds)} bounds (want bounds + 1)")
        if any(lo >= hi for lo, hi in zip(self.bounds, self.bounds[1:])):
            raise ValueError("bounds: not strictly ascending")
        if sum(self.counts) != self.count:
            raise ValueError(f"count: {self.count}, but the buckets hold {sum(self.counts)}")
        return self


class CounterDelta(Wire):
    """One counter series over one scrape interval (tokens, requests by outcome, preemptions)."""

    name: Label = Field(description="prompt_tokens, generation_tokens, preemptions, requests (finished, not "
                                    "failed), requests_failed (finished as failures)")
    metric: Label
    labels: dict[Label, Label] = Field(default_factory=dict, max_length=32)
    delta: NonNegFloat
    reset: bool = Field(default=False, description="the server restarted in the interval: counted since its start")


class GaugeValue(Wire):
    """One gauge series at scrape time (requests running/waiting, KV-cache usage 0-1)."""

    name: Label = Field(description="requests_running, requests_waiting, kv_cache_usage")
    metric: Label
    labels: dict[Label, Label] = Field(default_factory=dict, max_length=32)
    value: float


class InferenceMetrics(_TimedRecord):
    """inference.metrics, key ``node``: one model of one serving process (vLLM, SGLang, TGI, Triton) over one
    scrape interval, ``start_ts`` to ``ts`` (the agent's clock at the two scrapes). Deltas, not
    the server's cumulative totals, so a restarted server (counters from zero) never reads as a
    negative rate or a burst; ``reset`` marks the interval where that happened."""

    schema_: Literal["inference_metrics/1"] = Field(default="inference_metrics/1", alias="schema")
    node: Label
    seq: NonNegInt
    boot_id: Label
    start_ts: Timestamp
    engine: Literal["vllm", "sglang", "tgi", "triton"]
    service: Label
    model: Label
    url: Text
    pid: NonNegInt | None = Field(default=None, description="the serving process, when the agent found it")
    gpu_indices: list[NonNegInt] = Field(default_factory=list, max_length=64)
    histograms: list[HistogramDelta] = Field(default_factory=list, max_length=256)
    counters: list[CounterDelta] = Field(default_factory=list, max_length=1024)
    gauges: list[GaugeValue] = Field(default_factory=list, max_length=1024)

    @model_validator(mode="after")
    def _interval(self) -> "InferenceMetrics":
        if self.start_ts > self.ts:
            raise ValueError(f"start_ts: {self.start_ts} is after ts {self.ts}")
        return self


# --------------------------------------------------------------------------- inference.sli


class SliCount(Wire):
    """One objective's events in one minute: good and total, and (latency) how many sat between
    the judged bound and the next, so count as bad without being shown bad."""

    objective: Label = Field(description="the engine.slo key: ttft_p99, error_rate")
    good: NonNegInt
    total: NonNegInt
    undecided: NonNegInt = 0
    note: Text = Field(default="", description="latency: how the threshold is judged on the buckets")

    @model_validator(mode="after")
    def _counts(self) -> "SliCount":
        if self.good > self.total:
            raise ValueError(f"good: {self.good} is more than total {self.total}")
        return self


class ServiceSli(_TimedRecord):
    """inference.sli, key ``service``: one service's SLO events on one node over one minute,
    ``ts - 60`` to ``ts`` (event time), from the inference stage (key node) to the service stage
    (key service), which sums every node's and judges the fleet's burn rates. Progress reports
    (``stage_progress/1``, header ``gw-progress``) ride the same topic as on task.summaries."""

    schema_: Literal["service_sli/1"] = Field(default="service_sli/1", alias="schema")
    service: Label
    node: Label
    model: Label = ""
    engine: Label = ""
    counts: list[SliCount] = Field(default_factory=list, max_length=64)


# --------------------------------------------------------------------------- alerts


class Tier(StrEnum):
    INFO = "info"
    ATTENTION = "attention"
    CRITICAL = "critical"


class AlertState(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


class Baseline(Wire):
    """The baseline band an alert was judged against."""

    median: float
    mad: float
    low: float
    high: float
    samples: NonNegInt


class Evidence(Wire):
    """The numbers behind an alert, so a person believes it without a dashboard."""

    values: dict[Label, float] = Field(default_factory=dict)
    window_s: NonNegFloat | None = None
    held_for_s: NonNegFloat | None = None
    slope: float | None = None
    slope_unit: Label | None = None
    monotonic: float | None = Field(default=None, ge=0, le=1)
    baseline: Baseline | None = None
    count: NonNegInt | None = None
    note: Text | None = None


SIMULATED_LABEL = "simulated"
"""The label (value ``"true"``) of an alert raised from simulated records."""


def simulated_labels(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` with the simulated mark added."""
    return {**labels, SIMULATED_LABEL: "true"}


def is_simulated(labels: dict[str, str]) -> bool:
    """Whether an alert's labels say it was raised from simulated records."""
    return labels.get(SIMULATED_LABEL) == "true"


class AlertTransition(_TimedRecord):
    """alerts, key ``fingerprint``: an alert starting or ending (event time ``ts``)."""

    schema_: Literal["alert/1"] = Field(default="alert/1", alias="schema")
    fingerprint: Label
    rule: Label
    tier: Tier
    state: AlertState
    labels: dict[Label, Label] = Field(default_factory=dict)
    started_at: Timestamp
    ended_at: Timestamp | None = None
    summary: Text
    action: Text = ""
    evidence: Evidence = Field(default_factory=Evidence)


# --------------------------------------------------------------------------- control


class Matcher(Wire):
    label: Label
    op: Literal["=", "!=", "=~", "!~"] = "="
    value: Label


class Silence(Wire):
    schema_: Literal["silence/1"] = Field(default="silence/1", alias="schema")
    id: Label
    matchers: list[Matcher] = Field(min_length=1)
    starts_at: Timestamp
    ends_at: Timestamp
    created_by: Label
    comment: Text = ""


class Ack(Wire):
    schema_: Literal["ack/1"] = Field(default="ack/1", alias="schema")
    fingerprint: Label
    by: Label
    at: Timestamp
    comment: Text = ""


class OnCallOverride(Wire):
    schema_: Literal["oncall_override/1"] = Field(default="oncall_override/1", alias="schema")
    id: Label
    schedule: Label
    user: Label
    starts_at: Timestamp
    ends_at: Timestamp


ControlRecord = Annotated[Union[Silence, Ack, OnCallOverride], Field(discriminator="schema_")]


# --------------------------------------------------------------------------- remediation


class RemediationOutcome(StrEnum):
    DONE = "done"
    """The backend changed the node."""
    ALREADY = "already"
    """Nothing to do: the node was already in the state asked for (by gpuwarden or by someone else)."""
    REFUSED = "refused"
    """Not attempted: a simulated or resolved alert, an action not offered for the rule, a node
    drained by someone else that ``resume`` leaves alone."""
    FAILED = "failed"
    """The backend could not be reached or said no; the node is as it was, as far as we know."""


#: What remediation does to a node in its scheduler (docs/remediation.md).
RemediationAction = Literal["drain", "resume"]


class RemediationRecord(_TimedRecord):
    """remediation, key ``node``: one attempt to take a node out of (or back into) its
    scheduler because of an alert, with who asked and what came of it: the audit trail."""

    schema_: Literal["remediation/1"] = Field(default="remediation/1", alias="schema")
    node: Label
    action: RemediationAction
    backend: Label
    outcome: RemediationOutcome
    by: Label
    """Who confirmed: a user, the console's user, or ``auto:<rule>`` for an operator's auto policy."""
    fingerprint: Label = ""
    rule: Label = ""
    reason: Text = ""
    """What the scheduler was told (Slurm's drain reason, the taint's value)."""
    detail: Text = ""
    """What the backend answered, or why nothing was done."""


# --------------------------------------------------------------------------- dead letters


class DeadLetter(Wire):
    """``<topic>.dlq``: a record that failed validation, with its original bytes.

    The value is kept whole up to the reader's record limit (``limits.max_record_bytes``);
    an oversized one keeps its first :data:`DEAD_LETTER_PREFIX` bytes (``truncated``), and
    every letter says the original's length and SHA-256, so a dead letter stays small
    enough to send whatever it holds (one that failed to send stopped every worker)."""

    schema_: Literal["dead_letter/2"] = Field(default="dead_letter/2", alias="schema")
    topic: Label
    partition: int | None = None
    offset: int | None = None
    key_b64: str | None = None
    key_bytes: NonNegInt | None = None
    value_b64: str
    value_bytes: NonNegInt
    value_sha256: str
    truncated: bool = False
    error: str
    received_at: Timestamp


#: What an oversized value (or key) keeps in its dead letter.
DEAD_LETTER_PREFIX = 64 << 10
DEAD_LETTER_KEY_PREFIX = 1 << 10


# --------------------------------------------------------------------------- codec

Record = Annotated[
    Union[
        NodeSnapshot,
        GpuEvent,
        TaskMetrics,
        TaskSummary,
        StageProgress,
        SchedulerJob,
        NodeCapacity,
        SchedulerPoll,
        SchedulerRepeat,
        JobAllocation,
        InferenceMetrics,
        ServiceSli,
        AlertTransition,
        Silence,
        Ack,
        OnCallOverride,
        RemediationRecord,
        DeadLetter,
    ],
    Field(discriminator="schema_"),
]
_RECORD = TypeAdapter(Record)


class RecordUnion:
    """Several record kinds that share a topic, decoded like one model (``decode(data, model)``)
    by their ``schema``: ``scheduler.jobs`` carries jobs, node capacities and poll ends."""

    def __init__(self, *models: type[Wire]) -> None:
        self.models = models
        self._adapter: TypeAdapter = TypeAdapter(Annotated[Union[models], Field(discriminator="schema_")])

    def model_validate_json(self, data: bytes | str, context: dict | None = None) -> Any:
        return self._adapter.validate_json(data, context=context)


#: What ``scheduler.jobs`` holds.
SCHEDULER_RECORDS = RecordUnion(SchedulerJob, NodeCapacity, SchedulerPoll)
_CONTROL = TypeAdapter(ControlRecord)


_EXTRA = attrgetter("__pydantic_extra__")
#: Per record class, its fields that hold contract models (where unknown fields can nest).
_NESTED: dict[type, tuple[str, ...]] = {
    NodeSnapshot: ("gpus", "processes"),
    GpuEvent: ("catalogue",),
    TaskMetrics: ("metrics",),
    AlertTransition: ("evidence",),
}


class ContractError(ValueError):
    """A record that breaks the contract; ``str()`` names each offending field."""

    def __init__(self, message: str, fields: list[str] | None = None) -> None:
        super().__init__(message)
        self.fields = fields or []


def field_path(loc: tuple[Any, ...]) -> str:
    """``('receivers', 2, 'feishu', 'secret')`` → ``receivers[2].feishu.secret``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "<record>"


def describe(err: ValidationError, skip_tags: bool = True) -> tuple[str, list[str]]:
    """One line per error: ``field.path: message (got …)``; secrets never echoed."""
    lines, fields = [], []
    for e in err.errors(include_url=False, include_input=False):
        loc = tuple(p for p in e["loc"] if not (skip_tags and isinstance(p, str) and "/" in p))
        path = field_path(loc)
        fields.append(path)
        lines.append(f"{path}: {e['msg']}")
    return "; ".join(lines), fields


def encode(record: BaseModel) -> bytes:
    return record.model_dump_json(by_alias=True, exclude_none=False).encode()


def _version_error(err: ValidationError) -> ContractError | None:
    """A ``schema`` this reader does not know, said plainly: a newer major version (the
    writer was upgraded first) or a record of another kind."""
    for e in err.errors(include_url=False):
        if e["type"] == "union_tag_invalid":
            got, reads = e["ctx"]["tag"], e["ctx"]["expected_tags"]
        elif e["type"] == "literal_error" and tuple(e["loc"]) == ("schema",):
            got, reads = e["input"], e["ctx"]["expected"]
        else:
            continue
        known = sorted(r.strip(" '") for r in str(reads).replace(" or ", ",").split(","))
        kind = str(got).partition("/")[0]
        same = [r for r in known if r.partition("/")[0] == kind]
        if same:
            why = f"schema: {got!r} is a version this reader does not know (it reads " \
                  f"{', '.join(same)}): upgrade the reader before the writers"
        else:
            why = f"schema: {got!r} is not a record this reader takes (it reads {', '.join(known)})"
        return ContractError(why, ["schema"])
    return None


def unknown_fields(record: BaseModel) -> list[str]:
    """Paths of the fields ``record`` carries that this version of the contract does not
    define (ignored): a writer newer than its reader. ``[]`` for a record of this version."""
    out = [*(record.__pydantic_extra__ or ())]
    for name in _NESTED.get(type(record), ()):
        value = getattr(record, name)
        if isinstance(value, list):  # a batch's items: each field once (``metrics[].x``)
            if any(map(_EXTRA, value)):  # the usual none tested in C: this ran for every record
                out.extend(dict.fromkeys(f"{name}[].{k}" for v in value for k in v.__pydantic_extra__ or ()))
        elif value is not None and value.__pydantic_extra__:
            out.extend(f"{name}.{k}" for k in value.__pydantic_extra__)
    return out


def decode(
    data: bytes | str,
    model: Any = None,
    *,
    now: float | None = None,
    max_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    max_future_skew_s: float = DEFAULT_MAX_FUTURE_SKEW_S,
    max_past_skew_s: float | None = None,
) -> Any:
    """Parse one record; raise :class:`ContractError` naming the fields at fault.

    ``model`` is a contract class (or None for any record kind, dispatched on
    ``schema``). ``now`` enables the timestamp checks (future skew, and past skew when
    ``max_past_skew_s`` is given); pass ``time.time()`` at live boundaries, or leave it
    out for trusted replays. Unknown fields are accepted (see :func:`unknown_fields`).
    """
    size = len(data)
    if size > max_bytes:
        raise ContractError(f"record: {size} bytes exceeds the limit of {max_bytes} bytes", ["record"])
    ctx = None if now is None else {"now": now, "max_future_skew_s": max_future_skew_s,
                                    "max_past_skew_s": max_past_skew_s}
    try:
        if model is None:
            return _RECORD.validate_json(data, context=ctx)
        return model.model_validate_json(data, context=ctx)
    except ValidationError as e:
        version = _version_error(e)
        if version is not None:
            raise version from None
        msg, fields = describe(e)
        raise ContractError(msg, fields) from None


@dataclass(frozen=True)
class Salvaged:
    """A task-metrics batch whose envelope is sound but some items are not: the good items
    (``batch``) and, per bad one, a one-item batch holding it as sent, and why."""

    batch: TaskMetrics
    bad: list[tuple[bytes, str]]


def salvage_task_metrics(data: bytes | str, *, now: float | None = None,
                         max_future_skew_s: float = DEFAULT_MAX_FUTURE_SKEW_S,
                         max_past_skew_s: float | None = None) -> Salvaged | None:
    """After :func:`decode` rejected a :class:`TaskMetrics`: its items checked one by one.
    None when the batch itself is at fault (not JSON, a bad ``node`` or ``schema``, no list of
    items, or no good item at all): the whole record is a dead letter then."""
    try:
        raw = json.loads(data)
    except ValueError:
        return None
    items = raw.get("metrics") if isinstance(raw, dict) else None
    if not isinstance(items, list) or not items or len(items) > MAX_BATCH_ITEMS:
        return None
    ctx = None if now is None else {"now": now, "max_future_skew_s": max_future_skew_s,
                                    "max_past_skew_s": max_past_skew_s}
    good, bad = [], []
    for i, item in enumerate(items):
        try:
            good.append(TaskMetricItem.model_validate(item, context=ctx))
        except ValidationError as e:
            alone = json.dumps({**raw, "metrics": [item]}, separators=(",", ":")).encode()
            bad.append((alone, f"metrics[{i}]." + describe(e)[0].replace("; ", f"; metrics[{i}].")))
    if not good or not bad:
        return None
    try:
        batch = TaskMetrics.model_validate({**raw, "metrics": good}, context=ctx)
    except ValidationError:
        return None
    return Salvaged(batch, bad)


def decode_control(data: bytes | str) -> Silence | Ack | OnCallOverride:
    try:
        return _CONTROL.validate_json(data)
    except ValidationError as e:
        msg, fields = describe(e)
        raise ContractError(msg, fields) from None


def dead_letter(
    topic: str, value: bytes, error: str, *, key: bytes | None = None,
    partition: int | None = None, offset: int | None = None, received_at: float | None = None,
    max_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> DeadLetter:
    """The dead letter of ``value``: kept whole up to ``max_bytes``, else its prefix."""
    import base64
    import hashlib

    kept = value if len(value) <= max_bytes else value[:min(DEAD_LETTER_PREFIX, max_bytes)]
    kept_key = None if key is None else key[:DEAD_LETTER_KEY_PREFIX]
    return DeadLetter(
        topic=topic,
        partition=partition,
        offset=offset,
        key_b64=None if kept_key is None else base64.b64encode(kept_key).decode(),
        key_bytes=None if key is None else len(key),
        value_b64=base64.b64encode(kept).decode(),
        value_bytes=len(value),
        value_sha256=hashlib.sha256(value).hexdigest(),
        truncated=len(kept) < len(value),
        error=error[:8192],
        received_at=time.time() if received_at is None else received_at,
    )


# --------------------------------------------------------------------------- topics


class Topics:
    """Topic names in one place; a prefix lets several fleets share one cluster."""

    BASE = {
        "samples": "gpu.samples",
        "events": "gpu.events",
        "metrics": "task.metrics",
        "summaries": "task.summaries",
        "jobs": "scheduler.jobs",
        "allocations": "scheduler.allocations",
        "inference": "inference.metrics",
        "sli": "inference.sli",
        "alerts": "alerts",
        "control": "control",
        "remediation": "remediation",
    }

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.samples = prefix + self.BASE["samples"]
        self.events = prefix + self.BASE["events"]
        self.metrics = prefix + self.BASE["metrics"]
        self.summaries = prefix + self.BASE["summaries"]
        self.jobs = prefix + self.BASE["jobs"]
        self.allocations = prefix + self.BASE["allocations"]
        self.inference = prefix + self.BASE["inference"]
        self.sli = prefix + self.BASE["sli"]
        self.alerts = prefix + self.BASE["alerts"]
        self.control = prefix + self.BASE["control"]
        #: Audit records of drains and resumes; kept in the spool (not in :meth:`all`: not published).
        self.remediation = prefix + self.BASE["remediation"]

    @staticmethod
    def dlq(topic: str) -> str:
        return topic + ".dlq"

    def all(self) -> list[str]:
        return [self.samples, self.events, self.metrics, self.summaries, self.jobs, self.allocations,
                self.inference, self.sli, self.alerts, self.control]

    def for_record(self, record: BaseModel) -> str:
        """The topic a contract record belongs on."""
        return {
            NodeSnapshot: self.samples,
            GpuEvent: self.events,
            TaskMetrics: self.metrics,
            TaskSummary: self.summaries,
            StageProgress: self.summaries,
            SchedulerJob: self.jobs,
            NodeCapacity: self.jobs,
            SchedulerPoll: self.jobs,
            SchedulerRepeat: self.jobs,
            JobAllocation: self.allocations,
            InferenceMetrics: self.inference,
            ServiceSli: self.sli,
            AlertTransition: self.alerts,
            Silence: self.control,
            Ack: self.control,
            OnCallOverride: self.control,
            RemediationRecord: self.remediation,
        }[type(record)]


def record_key(record: BaseModel) -> str:
    """The partition key the design gives each record kind."""
    if isinstance(record, (NodeSnapshot, GpuEvent, TaskMetrics, InferenceMetrics, JobAllocation, RemediationRecord)):
        return record.node
    if isinstance(record, TaskSummary):
        return record.task
    if isinstance(record, ServiceSli):
        return record.service
    if isinstance(record, StageProgress):
        return f"progress:{record.partition}"
    if isinstance(record, (SchedulerJob, NodeCapacity, SchedulerPoll, SchedulerRepeat)):
        return record.cluster
    if isinstance(record, AlertTransition):
        return record.fingerprint
    if isinstance(record, Silence):
        return f"silence:{record.id}"
    if isinstance(record, Ack):
        return f"ack:{record.fingerprint}"
    if isinstance(record, OnCallOverride):
        return f"oncall:{record.id}"
    raise TypeError(f"not a keyed contract record: {type(record).__name__}")
