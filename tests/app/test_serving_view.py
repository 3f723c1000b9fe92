"""The live view's inference panel: each service's p99s as the buckets say them, its budgets."""

from __future__ import annotations

from rich.console import Console

from gpuwarden.app.live_view import render
from gpuwarden.app.serving_view import service_rows
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from tests.streams.test_inference_stage import BODY, SLO, Feed, _ttft


def _text(renderable) -> str:
    c = Console(width=200, height=60, color_system=None, record=True)
    c.print(renderable)
    return c.export_text()


def test_panel_shows_services_with_bucket_bounds_and_budget() -> None:
    engine = Engine(config=EngineConfig.model_validate({"slo": {"chat": SLO}}))
    assert service_rows(engine) == []  # no service seen: no pane
    assert "Inference services" not in _text(render(engine, 0.0))
    f = Feed(engine)  # type: ignore[arg-type]  # the inference stage and the service stage behind it
    f.minutes(30, ok=600, ttft=_ttft(600, BODY))
    f.minutes(5, failed=600)  # an outage: budget spent, an alert open
    text = _text(render(engine, 0.0))
    assert "Inference services (last hour)" in text
    row = next(line for line in text.splitlines() if "chat" in line and "vllm" in line)
    assert "≤ 0.75 s" in row and "error_rate" in row and "vllm" in row
