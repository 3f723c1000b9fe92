"""The stream engine's config section (``engine:``) and what the stream commands read."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic import Field

from gpuwarden.config import CommonSettings, MetricsEndpoint, Section
from gpuwarden.slo import ServiceSlo
from gpuwarden.units import Duration


class SchedulerRules(Section):
    """``engine.scheduler``: the scheduler stage's figures and default rules (docs/scheduler.md)."""

    period: Duration = Field(default=300.0, gt=0)
    """The unit of "consecutive periods" for the waiting-time rule."""
    wait_periods: int = Field(default=3, ge=1)
    """A class's waiting time above its baseline this many periods in a row: attention."""
    wait_mads: float = Field(default=3.0, gt=0)
    """Above the baseline: past the median wait plus this many MADs."""
    wait_min: Duration = Field(default=600.0, ge=0)
    """And at least this long (a 2-minute wait against a 20-second baseline is no news)."""
    wait_baseline_min: int = Field(default=10, ge=1)
    """Started jobs a class needs before its waiting times are judged."""
    fragmentation_for: Duration = Field(default=600.0, ge=0)
    """A pending job blocked by fragmentation this long: attention with the nodes and free GPUs."""
    unused_for: Duration = Field(default=450.0, ge=0)
    """A job holding GPUs it does not use (util under 5 %) this long: an alert to its owner (within
    10 min of the GPUs going idle, at the stage's evaluation instants)."""
    unused_min_gpus: int = Field(default=1, ge=1)
    """Unused GPUs of a job on one node before it counts (1: any)."""
    unused_attention_gpus: int = Field(default=1, ge=1)
    """GPUs the job holds on the node for that alert to be attention; fewer: info (N of issue #30)."""
    requeue_info: int = Field(default=2, ge=1)
    """Preemptions/requeues of one job: info from this many ..."""
    requeue_attention: int = Field(default=4, ge=1)
    """... attention from this many."""
    success_window: int = Field(default=20, ge=1)
    """A class's success rate: its last this many ended jobs ..."""
    success_min_jobs: int = Field(default=20, ge=1)
    """... against the jobs before them (at least this many) ..."""
    success_drop: float = Field(default=0.2, gt=0, le=1)
    """... attention when the recent rate is this far (a fraction) below the baseline rate."""
    job_history: int = Field(default=512, ge=16)
    """Waiting times and outcomes kept per class for the baselines."""


class ServiceServing(Section):
    """``engine.serving.<service>``: the serving engine's own settings the rules compare with."""

    max_batch: int | None = Field(default=None, ge=1, description="the server's max batch (vLLM max_num_seqs)")


class EngineConfig(MetricsEndpoint):
    rules: Path | None = None
    observation_period: Duration = 14 * 86400
    """A task class raises no deviation alerts (shows "learning") for this long after first seen."""
    allowed_lateness: Duration = 30.0
    """Records up to this much older than the newest of their node are reordered; older ones dropped."""
    max_source_skew: Duration = Field(default=6 * 3600.0, ge=0)
    """Kafka only: how far (event time) a node's records wait for an input topic that has records
    not yet read (so they are not dropped as late while catching up); past this it is ignored.
    Stage 2 waits this far for a stage-1 partition that is still catching up."""
    summary_lateness: Duration = Field(default=300.0, ge=0)
    """Stage 2 holds a task class's summaries until each of its contributors (task on a node) has
    sent one as new, so results do not depend on which node's summaries arrive first (on Kafka: one
    node catching up after a takeover); a contributor this far behind the class's newest no longer
    holds it (0: apply on arrival). Kafka: stage 2 also waits for every stage-1 partition's
    progress (a caught-up partition whose nodes went silent: at most this far)."""
    commit_interval: Duration = Field(default=0.25, gt=0)
    """Kafka only: wall time a task's transaction that holds outputs (summaries, allocations,
    dead letters) stays open for more batches; one with an alert transition commits at once, one
    with only input offsets and progress reports after 5 s. Readers see outputs at the commit."""
    snapshot_interval: Duration = Field(default=300.0, gt=0)
    """Kafka only: wall time after which a task that changed writes a snapshot of its state (its
    changed keys' envelopes); between snapshots each commit logs its batches, which a new owner
    applies again (docs/streams-kafka.md)."""
    snapshot_records: int = Field(default=20_000, ge=1)
    """Kafka only: input records after which a task writes a snapshot (bounds a takeover's replay)."""
    bucket: Duration = Field(default=15.0, gt=0)
    """Width of the event-time buckets windows are made of; also the rule evaluation cadence."""
    eval_interval: Duration = Field(default=30.0, gt=0)
    """Cadence of rule evaluation on bucket closes (event-count rules also run on each event)."""
    summary_interval: Duration = Field(default=60.0, gt=0)
    """Task summaries (stage 1 → stage 2) per this much event time; a multiple of ``bucket``."""
    history: Duration = Field(default=2 * 3600.0, gt=0)
    """Stage 2 job windows keep this much; stage 1 keeps what its rules read (longest window per metric)."""
    baseline_samples: int = Field(default=4096, ge=16)
    """Most recent task-summary values kept per class and statistic for the median/MAD."""
    baseline_min_samples: int = Field(default=30, ge=1)
    baseline_refresh: Duration = 3600.0
    """How often (event time) a class recomputes its median/MAD bands."""
    gpu_expiry: Duration = 6 * 3600.0
    """A GPU absent this long is forgotten (a lost GPU stays alerted until then)."""
    task_expiry: Duration = 600.0
    job_expiry: Duration = 1800.0
    dedup_window: int = Field(default=4096, ge=16)
    """Recent record ids remembered per node for duplicate detection."""
    scheduler: SchedulerRules = Field(default_factory=SchedulerRules)
    """The scheduler stage (key cluster): queues, fragmentation, allocated versus used."""
    slo: dict[str, ServiceSlo] = Field(default_factory=dict)
    """Per inference service (``agent.inference.targets[].service``): its objectives and window,
    judged by multi-window burn-rate alerts (docs/inference.md)."""
    serving: dict[str, ServiceServing] = Field(default_factory=dict)
    """Per inference service: what its server is configured with (``max_batch``), for the rules
    that compare the real batch with it."""


class StreamsSettings(CommonSettings, Protocol):
    engine: EngineConfig
