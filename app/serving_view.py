"""The live view's inference panel: each service on each node with its p99s (as the buckets say
them), from the inference stage's read-only views, and what is left of the service's error
budgets over all its nodes (the service stage's)."""

from __future__ import annotations

from gpuwarden.streams.engine import Engine

#: The model and engine last: a narrow pane leaves them out first.
SERVICE_COLUMNS = ("node", "service", "TTFT p99", "ITL p99", "tokens/s", "budget left", "alerts", "model", "engine")


def service_rows(engine: Engine) -> list[tuple[str, ...]]:
    """One row per service the inference stage has seen (none: the pane is left out)."""
    rows = []
    for v in engine.inference.views():
        left = engine.services.budgets(v.service)
        budget = ", ".join(f"{k} {max(x, 0.0):.1%}" for k, x in sorted(left.items())) or "no SLO"
        rows.append((v.node, v.service, v.ttft_p99, v.itl_p99, f"{v.tokens_per_s:,.0f}", budget,
                     str(len(v.firing)) if v.firing else "", v.model, v.engine))
    return rows
