"""Card-hour accounting from recorded history: who held GPUs, who held them idle, what failed.

The unit is the card-hour: a GPU held by at least one process during a
snapshot's sample interval counts as held for that interval.  When several
owners share a GPU in one interval the interval is split evenly between them,
so the card-hours of all rows add up to the fleet's held card-hours.  A held
GPU whose utilization is below ``idle_util_below`` is idle-allocated (a
GPU whose utilization is unknown is never called idle).  Everything is in
event time, so a report over replayed or imported history is the same as one
over the live spool. Tokens cover the same span: each throughput report's rate holds until
the next, the last one to the end of the run's card-hours (its last snapshot, or its exit).
Inference services get their own rows (``serving.py``): output tokens, tokens/s, cost per
million output tokens, idle serving GPU-hours, and each declared SLO's error budget remaining
over its window (``gpuwarden.slo``; the SLOs are the engine's ``engine.slo``,
handed in by the composition root).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwarden.contract import (
    AlertState,
    AlertTransition,
    Evidence,
    GpuProcess,
    InferenceMetrics,
    ModelMode,
    NodeSnapshot,
    TaskMetric,
    TaskMetricKind,
    Tier,
    Topics,
    decode,
    unbatch,
)
from gpuwarden.history import queues, tables
from gpuwarden.history.config import AccountingConfig, HistorySettings
from gpuwarden.history.flops import flops_per_token, peak_tflops
from gpuwarden.history.serving import ServingRow, serving_rows
from gpuwarden.history.sources import BATCH_SPAN_S, in_range
from gpuwarden.humantime import span
from gpuwarden.slo import Budget, ServiceSlo, service_budgets
from gpuwarden.spool import Spool

UNKNOWN = "(unknown)"
WEEK_S = 7 * 86400.0
#: Inference records read from before an SLO window's start, to tell whether the history covers it.
COVER_S = 3600.0


@dataclass(slots=True)
class UsageRow:
    key: str
    card_hours: float = 0.0
    mfu_card_hours: float = 0.0  # the card-hours its MFU covers: tasks with a model and a known GPU peak
    idle_card_hours: float = 0.0
    failed_jobs: int = 0
    reruns: int = 0
    cost: float | None = None
    idle_cost: float | None = None
    tokens: float = 0.0
    token_card_hours: float = 0.0  # card-hours of the tasks that reported tokens/s
    model_flops: float = 0.0  # FLOPs their tokens needed (tasks with a model and a known GPU peak)
    peak_flops: float = 0.0  # what their GPUs could do in the same GPU-time
    unknown_gpus: list[str] = field(default_factory=list)  # GPU models without a peak: MFU unknown
    cost_per_mtok: float | None = None

    @property
    def mfu(self) -> float | None:
        return self.model_flops / self.peak_flops if self.peak_flops else None


@dataclass(slots=True)
class Usage:
    by: str
    since: float
    until: float
    price_per_gpu_hour: float | None
    idle_util_below: float
    rows: list[UsageRow] = field(default_factory=list)
    serving: list[ServingRow] = field(default_factory=list)
    budgets: list[Budget] = field(default_factory=list)

    @property
    def total(self) -> UsageRow:
        t = UsageRow("total")
        for r in self.rows:
            t.card_hours += r.card_hours
            t.mfu_card_hours += r.mfu_card_hours
            t.idle_card_hours += r.idle_card_hours
            t.failed_jobs += r.failed_jobs
            t.reruns += r.reruns
            t.tokens += r.tokens
            t.token_card_hours += r.token_card_hours
            t.model_flops += r.model_flops
            t.peak_flops += r.peak_flops
            t.unknown_gpus = sorted({*t.unknown_gpus, *r.unknown_gpus})
        _price(t, self.price_per_gpu_hour)
        return t


def _price(row: UsageRow, price: float | None) -> None:
    if price is not None:
        row.cost = row.card_hours * price
        row.idle_cost = row.idle_card_hours * price
        if row.tokens:
            row.cost_per_mtok = row.token_card_hours * price / (row.tokens / 1e6)


def owner(p: GpuProcess, by: str) -> str:
    if by == "user":
        return p.user or (f"uid:{p.uid}" if p.uid is not None else UNKNOWN)
    if by == "project":
        return p.project or p.pod_namespace or UNKNOWN
    return p.task or UNKNOWN


def _intervals(snaps: list[NodeSnapshot]) -> list[float]:
    """Each snapshot's sample interval: its own ``interval_s``, else the node's median tick.

    The median, not the gap to the next snapshot, so an agent outage is not
    billed as hours of holding.
    """
    gaps = [b.ts - a.ts for a, b in zip(snaps, snaps[1:]) if b.ts > a.ts]
    typical = statistics.median(gaps) if gaps else 0.0
    return [s.interval_s if s.interval_s is not None else typical for s in snaps]


@dataclass(slots=True)
class _Run:
    """One run of a task (a ``task_id``): when it was first seen, whether it failed, and what
    its effective compute needs (GPU-seconds per GPU model, tokens, the model's size)."""

    label: str
    first_ts: float
    failed_ts: float | None = None
    owner: str | None = None
    gpu_seconds: dict[str, float] = field(default_factory=dict)  # GPU model -> seconds held
    held_until: float | None = None  # its last snapshot holding a GPU: where its card-hours end
    ended_ts: float | None = None  # when it reported its exit
    tokens: float = 0.0
    rate: tuple[float, float] | None = None  # (ts, tokens/s) of its last throughput report
    model: TaskMetric | None = None
    serves: bool = False  # it reported a time to first token or a request latency: a server

    def add_throughput(self, m: TaskMetric) -> None:
        """Tokens between reports: each rate holds until the next."""
        if m.throughput_unit != "tokens/s" or m.throughput is None:
            return
        self._tokens_until(m.ts)
        self.rate = (m.ts, m.throughput)

    def _tokens_until(self, ts: float) -> None:
        if self.rate is not None and ts > self.rate[0]:
            self.tokens += self.rate[1] * (ts - self.rate[0])

    def end(self, until: float) -> float:
        """Where the last rate stops holding: the span its card-hours cover (its last snapshot in
        the window), its exit when it reported one earlier, ``until`` for a run no snapshot shows."""
        ends = [t for t in (self.held_until, self.ended_ts) if t is not None]
        return min(ends, default=until)

    @property
    def mode(self) -> ModelMode:
        """What it does with its model: as it said (``Task.model(..., mode=)``), else serving when
        it reported serving figures, else training."""
        if self.model is not None and self.model.model_mode is not None:
            return self.model.model_mode
        return ModelMode.SERVE if self.serves else ModelMode.TRAIN

    def compute(self, row: UsageRow, until: float) -> None:
        self._tokens_until(self.end(until))
        if not self.tokens:
            return
        row.tokens += self.tokens
        row.token_card_hours += sum(self.gpu_seconds.values()) / 3600.0
        if self.model is None or self.model.model_params is None:
            return
        peaks = {name: peak_tflops(name) for name in self.gpu_seconds}
        unknown = sorted(n or "?" for n, p in peaks.items() if p is None)
        if unknown:
            row.unknown_gpus = sorted({*row.unknown_gpus, *unknown})
            return
        m = self.model
        row.model_flops += self.tokens * flops_per_token(m.model_params, m.model_layers, m.model_hidden,  # type: ignore[arg-type]
                                                         m.model_seq_len, self.mode)
        row.peak_flops += sum(sec * peaks[n] * 1e12 for n, sec in self.gpu_seconds.items())  # type: ignore[operator]
        row.mfu_card_hours += sum(self.gpu_seconds.values()) / 3600.0


def compute_usage(records: Iterable[Any], *, by: str = "user", since: float, until: float,
                  idle_util_below: float = 5.0, price_per_gpu_hour: float | None = None,
                  slos: Mapping[str, ServiceSlo] | None = None) -> Usage:
    """Usage rows per owner over ``[since, until)`` from snapshots and task metrics; with
    ``slos``, each service's error budget over its SLO window ending at ``until`` (from the
    inference records before ``since`` too, when the window reaches further back)."""
    per_node: dict[str, list[NodeSnapshot]] = defaultdict(list)
    metrics: list[TaskMetric] = []
    inference: list[InferenceMetrics] = []
    every_inference: list[InferenceMetrics] = []
    for r in records:
        if isinstance(r, InferenceMetrics) and slos:
            every_inference.append(r)
        if not since <= r.ts < until:
            continue
        if isinstance(r, NodeSnapshot):
            per_node[r.node].append(r)
        elif isinstance(r, TaskMetric):
            metrics.append(r)
        elif isinstance(r, InferenceMetrics):
            inference.append(r)
    rows: dict[str, UsageRow] = {}

    def row(key: str) -> UsageRow:
        return rows.setdefault(key, UsageRow(key))

    runs: dict[str, _Run] = {}
    for snaps in per_node.values():
        snaps.sort(key=lambda s: s.ts)
        covered = float("-inf")  # a node's time up to here is counted
        for snap, nominal in zip(snaps, _intervals(snaps)):
            # A snapshot stands for the time since the one before, at most its interval: the same
            # moment sent twice (a redelivered record, overlapping runs in one spool) counts once.
            interval = min(nominal, snap.ts - covered)
            covered = snap.ts
            if interval <= 0:
                continue
            util = dict(zip(snap.gpus.index, snap.gpus.util_gpu))
            names = dict(zip(snap.gpus.index, snap.gpus.name))
            holders: dict[int, set[str]] = defaultdict(set)
            tasks: dict[int, set[str]] = defaultdict(set)
            for p in snap.processes.rows():
                holders[p.gpu_index].add(owner(p, by))
                if p.task_id:
                    tasks[p.gpu_index].add(p.task_id)
                    run = runs.setdefault(p.task_id, _Run(p.task or UNKNOWN, snap.ts))
                    run.first_ts = min(run.first_ts, snap.ts)
                    run.held_until = max(run.held_until or snap.ts, snap.ts)
                    run.owner = run.owner or owner(p, by)
            for gpu, ids in tasks.items():
                name = names.get(gpu) or ""
                for tid in ids:
                    secs = runs[tid].gpu_seconds
                    secs[name] = secs.get(name, 0.0) + interval / len(ids)
            for gpu, keys in holders.items():
                hours = interval / 3600.0 / len(keys)
                u = util.get(gpu)
                for k in keys:
                    row(k).card_hours += hours
                    if u is not None and u < idle_util_below:
                        row(k).idle_card_hours += hours
    for m in sorted(metrics, key=lambda m: m.ts):
        run = runs.setdefault(m.task_id, _Run(m.task, m.ts))
        run.first_ts = min(run.first_ts, m.ts)
        if run.owner is None:
            run.owner = m.task if by == "task-class" else (f"uid:{m.uid}" if by == "user" and m.uid is not None else None)
        failed = m.kind == TaskMetricKind.OOM or (m.kind == TaskMetricKind.EXIT and m.exit_code not in (None, 0))
        if failed and run.failed_ts is None:
            run.failed_ts = m.ts
        if m.kind == TaskMetricKind.EXIT and run.ended_ts is None:
            run.ended_ts = m.ts
        if m.kind == TaskMetricKind.THROUGHPUT:
            run.add_throughput(m)
        elif m.kind == TaskMetricKind.MODEL:
            run.model = m
        elif m.kind in (TaskMetricKind.TTFT, TaskMetricKind.LATENCY):
            run.serves = True
    for run in runs.values():
        if run.failed_ts is not None:
            row(run.owner or UNKNOWN).failed_jobs += 1
        run.compute(row(run.owner or UNKNOWN), until)
    for rerun in _reruns(runs.values()):
        row(rerun.owner or UNKNOWN).reruns += 1
    out = sorted(rows.values(), key=lambda r: (-r.card_hours, r.key))
    for r in out:
        _price(r, price_per_gpu_hour)
    return Usage(by, since, until, price_per_gpu_hour, idle_util_below, out,
                 serving_rows(inference, price_per_gpu_hour), service_budgets(every_inference, slos or {}, until))


def _reruns(runs: Iterable[_Run]) -> list[_Run]:
    """Runs that start after a failed run of the same task label; each failure pairs with one rerun."""
    out: list[_Run] = []
    by_label: dict[str, list[_Run]] = defaultdict(list)
    for r in runs:
        by_label[r.label].append(r)
    for group in by_label.values():
        waiting = 0  # failures not yet followed by a new run
        events = sorted([(r.first_ts, 1, r) for r in group]
                        + [(r.failed_ts, 0, r) for r in group if r.failed_ts is not None],
                        key=lambda e: (e[0], e[1]))
        for _ts, is_start, r in events:
            if not is_start:
                waiting += 1
            elif waiting:
                waiting -= 1
                out.append(r)
    return out


# --------------------------------------------------------------------------- rendering

_COLUMNS = ("card_hours", "idle_card_hours", "idle_share", "failed_jobs", "reruns", "cost", "idle_cost",
            "tokens", "cost_per_mtok", "mfu", "mfu_card_hours")


def _values(r: UsageRow) -> dict[str, Any]:
    """A row's figures: ``mfu`` a number or None (``unknown_gpus`` says why, when a GPU has no
    peak), over ``mfu_card_hours`` of its ``card_hours``."""
    d = asdict(r)
    d["idle_share"] = r.idle_card_hours / r.card_hours if r.card_hours else 0.0
    d["mfu"] = r.mfu
    return d


def _partial(r: UsageRow) -> bool:
    return r.mfu is not None and r.mfu_card_hours < r.card_hours * (1 - 1e-9)


def _mfu_cell(r: UsageRow) -> str:
    """``10.9 %``; marked ``10.9 %*`` when it covers part of the row's card-hours (a note under the
    table says which), so a total never passes a part off as the whole. No figure: ``unknown`` (a
    GPU without a known peak), else ``-``."""
    if r.mfu is None:
        return "unknown" if r.unknown_gpus else "-"
    return f"{r.mfu * 100:.1f} %" + ("*" if _partial(r) else "")


def _mfu_notes(rows: list[UsageRow]) -> str:
    """``* total: 10.9 % (of 8 of 12 card-hours)`` for each marked row, and the GPUs without a peak."""
    notes = [f"* {r.key}: {r.mfu * 100:.1f} % (of {tables.rounded(r.mfu_card_hours):,g} of "  # type: ignore[operator]
             f"{tables.rounded(r.card_hours):,g} card-hours)" for r in rows if _partial(r)]
    unknown = sorted({g for r in rows for g in r.unknown_gpus})
    if unknown:
        notes.append("MFU unknown on GPUs without a known dense BF16 peak: " + ", ".join(unknown))
    return "".join(n + "\n" for n in notes)


def to_json(u: Usage) -> str:
    return json.dumps({
        "by": u.by, "since": u.since, "until": u.until, "price_per_gpu_hour": u.price_per_gpu_hour,
        "idle_util_below": u.idle_util_below,
        "rows": [_values(r) for r in u.rows], "total": _values(u.total),
        "serving": [r.values() for r in u.serving],
        "budgets": [b.values() for b in u.budgets],
    }, indent=2)


def to_csv(u: Usage) -> str:
    return tables.to_csv(u.by, _COLUMNS, [(r.key, _values(r)) for r in [*u.rows, u.total]])


def _fmt(v: Any, col: str) -> str:
    if v is None:
        return "-"
    if col == "idle_share" and isinstance(v, float):
        return f"{v:.0%}"
    if col == "tokens":
        return f"{v / 1e6:,.1f} M"
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def to_table(u: Usage, currency: str = "", width: int = 110) -> str:
    """The terminal table, rendered to text (also the body of the weekly digest)."""
    tokens = any(r.tokens for r in u.rows)
    cols = [c for c in _COLUMNS if (u.price_per_gpu_hour is not None or "cost" not in c) and c != "mfu_card_hours"
            and (tokens or c not in ("tokens", "cost_per_mtok", "mfu"))]
    headers = [c.replace("_", " ") + (f" ({currency})" if "cost" in c and currency else "") for c in cols]
    rows = [(r.key, [_mfu_cell(r) if c == "mfu" else _fmt(v[c], c) for c in cols])
            for r in [*u.rows, u.total] for v in [_values(r)]]
    text = tables.to_text(f"GPU usage by {u.by}, {_day(u.since)} → {_day(u.until)}", u.by, headers, rows, width)
    text += _mfu_notes([*u.rows, u.total]) if "mfu" in cols else ""
    return text + (_serving_table(u, currency, width) if u.serving else "") + \
        (_budget_table(u.budgets, width) if u.budgets else "")


_SERVING = ("model", "requests", "failed", "output_tokens", "tokens_per_s", "tokens_per_s_per_gpu", "gpu_hours",
            "idle_gpu_hours", "cost_per_mtok")


def _serving_table(u: Usage, currency: str, width: int) -> str:
    """Inference services: throughput and cost per million output tokens."""
    cols = [c for c in _SERVING if u.price_per_gpu_hour is not None or c != "cost_per_mtok"]
    headers = [c.replace("_", " ").replace("mtok", "M output tokens") + (f" ({currency})" if "cost" in c and currency
                                                                          else "") for c in cols]

    def cell(v: Any, c: str) -> str:
        if c in ("requests", "failed"):
            return f"{v:,.0f}"
        return v if isinstance(v, str) else _fmt(v, "tokens" if c == "output_tokens" else c)

    total = ServingRow("total", "")
    for r in u.serving:
        for f in ("requests", "failed", "output_tokens", "seconds", "gpu_hours", "idle_gpu_hours"):
            setattr(total, f, getattr(total, f) + getattr(r, f))
    total.seconds = max((r.seconds for r in u.serving), default=0.0)  # services run side by side
    if u.price_per_gpu_hour is not None and total.output_tokens:
        total.cost_per_mtok = total.gpu_hours * u.price_per_gpu_hour / (total.output_tokens / 1e6)
    rows = [(r.service, [cell(r.values()[c], c) for c in cols]) for r in [*u.serving, total]]
    return tables.to_text("Inference services", "service", headers, rows, width)


def _budget_table(budgets: list[Budget], width: int) -> str:
    """Each service's error budget remaining over its SLO window, and how much of it was seen."""
    headers = ["model", "objective", "target", "events", "bad", "budget left", "over (seen of window)"]

    def cells(b: Budget) -> list[str]:
        over = span(b.window_s) if not b.partial else f"{span(b.seen_s)} of {span(b.window_s)}"
        return [b.model, b.objective, f"{b.target:.2%}".replace(".00%", "%"), f"{b.events.total:,}",
                f"{b.events.bad:,}", f"{b.remaining:.1%}", over]

    return tables.to_text("Error budgets (over each SLO window ending at the report's end)", "service", headers,
                          [(b.service, cells(b)) for b in budgets], width, total=False)


def lowest_budget(budgets: list[Budget]) -> str:
    """``chat error_rate: 40.0 % of the budget left over the 2 d seen of a 30 d window``."""
    b = min(budgets, key=lambda b: (b.remaining, b.service, b.objective))
    return f"{b.service} {b.objective}: {b.remaining:.1%} of the budget left {b.coverage()}"


def _day(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def render(u: Usage, fmt: str, currency: str = "") -> str:
    return {"json": to_json, "csv": to_csv}.get(fmt, lambda x: to_table(x, currency))(u)


# --------------------------------------------------------------------------- sources


def spool_records(spool: Spool, since: float, until: float, topic_prefix: str = "",
                  inference_since: float | None = None) -> Iterable[Any]:
    """Snapshots, task metrics (a batch's items, each by its own time) and inference records from
    the spool (inference records from ``inference_since`` when that is earlier: an SLO window
    reaching before the report's start); undecodable rows are skipped."""
    t = Topics(topic_prefix)
    if inference_since is not None and inference_since < since:
        yield from _decoded(spool, t.inference, inference_since, since)
    for topic in (t.samples, t.metrics, t.inference):
        yield from _decoded(spool, topic, since, until, BATCH_SPAN_S if topic == t.metrics else 0.0)


def _decoded(spool: Spool, topic: str, since: float, until: float, batch_span_s: float = 0.0) -> Iterable[Any]:
    """``topic``'s records in ``[since, until)``, batches unpacked; a batch is stored at its
    earliest item's time, so its rows are read from ``batch_span_s`` earlier."""
    for row in spool.read(topic=topic, since=since - batch_span_s, until=until):
        try:
            rec = decode(row.value)
        except ValueError:
            continue
        yield from (r for r in unbatch((rec,)) if in_range(r.ts, since, until))


def usage_from_spool(settings: HistorySettings, spool: Spool, *, since: float, until: float, by: str,
                     price: float | None = None, slos: Mapping[str, ServiceSlo] | None = None) -> Usage:
    cfg: AccountingConfig = settings.accounting
    longest = max((float(s.window) for s in (slos or {}).values()), default=0.0)
    return compute_usage(
        spool_records(spool, since, until, settings.kafka.topic_prefix,
                      inference_since=until - longest - COVER_S if longest else None),
        by=by, since=since, until=until, idle_util_below=cfg.idle_util_below,
        price_per_gpu_hour=price if price is not None else cfg.price_per_gpu_hour, slos=slos,
    )


# --------------------------------------------------------------------------- weekly digest


def weekly_usage(settings: HistorySettings, spool: Spool, now: float,
                 slos: Mapping[str, ServiceSlo] | None = None) -> Usage:
    """The last 7 days by ``accounting.digest_by`` (and each SLO's budget over its own window):
    what the weekly digest carries."""
    return usage_from_spool(settings, spool, since=now - WEEK_S, until=now, by=settings.accounting.digest_by,
                            slos=slos)


def weekly_queues(settings: HistorySettings, spool: Spool, now: float) -> queues.QueueReport:
    """The last 7 days of the scheduler's jobs in the spool, by partition: the digest's scheduler part."""
    return queues.from_spool(spool, by="partition", since=now - WEEK_S, until=now,
                             topic_prefix=settings.kafka.topic_prefix)


def digest_record(u: Usage, currency: str = "", sched: queues.QueueReport | None = None) -> AlertTransition:
    """The usage table (and the scheduler's, when ``sched`` holds jobs) as one info-tier alert
    record whose note is the tables.

    The report stops here: the composition root (``gpuwarden.app.usage``) hands the
    record to the notifiers' delivery, so this room never imports delivery.
    """
    total = u.total
    summary = (f"GPU usage {_day(u.since)} → {_day(u.until)}: {total.card_hours:.1f} card-hours, "
               f"{total.idle_card_hours:.1f} idle, {total.failed_jobs} failed, {total.reruns} reruns")
    if total.cost is not None:
        summary += f", cost {total.cost:.2f}{(' ' + currency) if currency else ''}"
    if u.serving:
        tokens = sum(r.output_tokens for r in u.serving)
        summary += f"; inference: {tokens / 1e6:,.1f} M output tokens over {len(u.serving)} service(s)"
    if u.budgets:
        summary += f"; lowest error budget: {lowest_budget(u.budgets)}"
    table = to_table(u, currency, width=100)
    if sched is not None and sched.total.jobs:
        t = sched.total
        summary += (f"; scheduler: {t.jobs} jobs, {t.retried_jobs} retried, queue wait p50 "
                    f"{_wait(t.queue_wait_p50_s)} / p90 {_wait(t.queue_wait_p90_s)}, {t.gpu_hours:.1f} GPU-hours")
        table += "\n" + queues.render(sched, "table")
    return AlertTransition(
        fingerprint=f"usage-digest-{int(u.until)}", rule="usage.weekly_digest", tier=Tier.INFO,
        state=AlertState.FIRING, labels={"report": "usage", "by": u.by}, started_at=u.since,
        ts=u.until, summary=summary, evidence=Evidence(note="```\n" + table[:3900] + "```"),
    )


def _wait(seconds: float | None) -> str:
    return "-" if seconds is None else span(seconds)
