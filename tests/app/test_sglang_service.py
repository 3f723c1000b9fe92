"""An SGLang v0.5.2 server (tests/fakes/sglang.py) scraped by the agent each minute into
``gpuwarden run``'s runner, then ``gpuwarden report usage`` over the spool, its figures by hand.

Minutes 1-30: 50 requests finish each minute (100 prompt tokens, 10 generated: a first token and
9 more). Minutes 31-40: 50 aborts sent each minute, nothing finishes. Requests 1,500 + 500 =
2,000, failed 500, output tokens 1,500 × 10 = 15,000; 2 GPUs for 40 min: 4/3 GPU-hours.
The error-rate objective (1 %) sees 2,000 events, 500 bad: 25 % bad is a burn of 25, over
2,401 s seen of its 30 d window: 1 - 25 × 2,401 / 2,592,000 of its budget left.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys

import pytest

from gpuwarden.app.standalone import Runner
from gpuwarden.contract import Topics
from gpuwarden.producers.config import InferenceConfig
from gpuwarden.producers.inference import InferenceScraper
from gpuwarden.spool import Spool
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from tests.fakes.sglang import FakeSglang, Finished

T0 = 1_700_000_000.0
MODEL = "org/chat-13b"


def test_report_usage_and_an_error_rate_objective_on_an_sglang_server(tmp_path) -> None:
    server = FakeSglang([MODEL])
    clock = [T0]
    scraper = InferenceScraper(InferenceConfig(targets=[{"url": server.url, "engine": "sglang", "service": "chat",
                                                         "gpus": [0, 1]}], timeout=1.0),
                               node="gn1", boot_id="b1", clock=lambda: clock[0])
    spool = Spool(tmp_path / "spool.db")
    out = io.StringIO()
    engine = Engine(config=EngineConfig.model_validate({"slo": {"chat": {"error_rate": "1%"}}}))
    runner = Runner(engine, spool, Topics(""), json_out=out, record=None, notifier=None, state_key="t")
    try:
        asyncio.run(runner.batch(scraper.scrape_all()))  # the baseline at T0
        for minute in range(40):
            for _ in range(50):
                if minute < 30:
                    server.metrics.finish(Finished(ttft=0.3, itl=[0.02] * 9, e2e=1.0, prompt_tokens=100))
                else:
                    server.metrics.abort()
            server.metrics.running.set(8 if minute < 30 else 0)
            clock[0] += 60
            asyncio.run(runner.batch(scraper.scrape_all()))
    finally:
        scraper.stop()
        server.close()
        spool.close()
    fired = {json.loads(line)["rule"] for line in out.getvalue().splitlines()}
    assert {"inference-failures", "slo-fast-burn"} <= fired  # the aborts are the objective's bad events

    cfg = tmp_path / "gw.yaml"
    cfg.write_text(f"spool:\n  path: {tmp_path / 'spool.db'}\nengine:\n  slo:\n    chat: {{error_rate: 1%}}\n")
    r = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "report", "usage", "--config", str(cfg),
                        "--since", str(int(T0)), "--until", str(int(T0) + 2401), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (row,) = doc["serving"]
    assert (row["service"], row["model"], row["gpus"]) == ("chat", MODEL, 2)
    assert (row["requests"], row["failed"], row["output_tokens"]) == (2000.0, 500.0, 15000.0)
    assert row["gpu_hours"] == pytest.approx(40 * 2 / 60)
    (budget,) = doc["budgets"]
    assert (budget["objective"], budget["events"], budget["bad"]) == ("error_rate", 2000, 500)
    assert budget["remaining"] == pytest.approx(1 - (500 / 2000) / 0.01 * 2401 / (30 * 86400))
