"""Inference services' business figures from their ``inference_metrics/1`` records.

Per service and model: requests finished and failed, output (generation) tokens, tokens/s
over the time it was scraped, tokens/s per GPU, GPU-hours (each interval's length times the
GPUs of the serving process), cost per million output tokens at the accounting price per
GPU-hour, and idle serving GPU-hours: intervals that finished no request with none running
(the GPUs allocated to a server nobody used). Event time only; a record repeated in the spool
(same ``boot_id`` and ``seq``) counts once. Each service's error budget over its SLO window is
the foundation's arithmetic (``gpuwarden.slo.service_budgets``), the same the streams alert on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from gpuwarden.contract import InferenceMetrics
from gpuwarden.slo import distinct


@dataclass(slots=True)
class ServingRow:
    service: str
    model: str
    requests: float = 0.0
    failed: float = 0.0
    output_tokens: float = 0.0
    seconds: float = 0.0  # event time covered by its intervals
    gpu_hours: float = 0.0
    idle_gpu_hours: float = 0.0
    gpus: int = 0  # the most GPUs its process held in one interval
    cost_per_mtok: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        return self.output_tokens / (self.gpu_hours * 3600) if self.gpu_hours else None

    def values(self) -> dict[str, Any]:
        return {**asdict(self), "tokens_per_s": self.tokens_per_s, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu}


def serving_rows(records: Iterable[InferenceMetrics], price_per_gpu_hour: float | None) -> list[ServingRow]:
    """One row per (service, model), busiest first."""
    rows: dict[tuple[str, str], ServingRow] = {}
    for r in distinct(records):
        row = rows.setdefault((r.service, r.model), ServingRow(r.service, r.model))
        span = r.ts - r.start_ts
        ok = sum(c.delta for c in r.counters if c.name == "requests")
        failed = sum(c.delta for c in r.counters if c.name == "requests_failed")
        row.requests += ok + failed
        row.failed += failed
        row.output_tokens += sum(c.delta for c in r.counters if c.name == "generation_tokens")
        row.seconds += span
        hours = span * len(r.gpu_indices) / 3600
        row.gpu_hours += hours
        row.gpus = max(row.gpus, len(r.gpu_indices))
        running = sum(g.value for g in r.gauges if g.name == "requests_running")
        if ok + failed == 0 and running == 0:
            row.idle_gpu_hours += hours
    out = sorted(rows.values(), key=lambda x: (-x.output_tokens, x.service, x.model))
    if price_per_gpu_hour is not None:
        for row in out:
            if row.output_tokens:
                row.cost_per_mtok = row.gpu_hours * price_per_gpu_hour / (row.output_tokens / 1e6)
    return out
