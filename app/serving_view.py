"""The live view's inference panel: each service with its p99s (as the buckets say them) and
what is left of its error budgets, from the inference stage's read-only views."""

from __future__ import annotations

from rich.table import Table

from gpuwarden.streams.engine import Engine


def render_services(engine: Engine) -> Table | None:
    """The panel, or None when no inference service was seen (the view then has no panel)."""
    views = engine.inference.views()
    if not views:
        return None
    t = Table(title="Inference services (last hour)", expand=True)
    for col in ("node", "service", "model", "engine", "TTFT p99", "ITL p99", "tokens/s", "budget left", "alerts"):
        t.add_column(col)
    for v in views:
        budget = ", ".join(f"{k} {max(x, 0.0):.1%}" for k, x in sorted(v.budget_remaining.items())) or "no SLO"
        t.add_row(v.node, v.service, v.model, v.engine, v.ttft_p99, v.itl_p99, f"{v.tokens_per_s:,.0f}", budget,
                  str(v.firing) if v.firing else "")
    return t
