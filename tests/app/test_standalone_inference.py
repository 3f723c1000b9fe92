"""``gpuwarden run``'s runner fed by the agent's inference scraper in one process: a fake vLLM
v0.10.2 (tests/fakes/vllm.py, the real prometheus_client) scraped each minute, its records in
the spool under ``inference.metrics`` and through the engine's inference stage. A server that
goes away, answers garbage or restarts gives a log line and no false alert; aborted requests do
alert."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from gpuwarden.app.standalone import Runner
from gpuwarden.contract import Topics
from gpuwarden.producers.config import InferenceConfig
from gpuwarden.producers.inference import InferenceScraper
from gpuwarden.spool import Spool
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from tests.fakes.vllm import FakeVllm, Request

MODEL = "org/chat-model"


class Clock:
    t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


def _req(reason: str = "stop") -> Request:
    return Request(ttft=0.3, itl=[0.02] * 5, e2e=1.0, queue=0.01, prompt_tokens=100, finished_reason=reason)


def test_scraped_records_reach_the_engine_and_the_spool(tmp_path, caplog) -> None:
    server = FakeVllm([MODEL])
    clock = Clock()
    scraper = InferenceScraper(InferenceConfig(targets=[{"url": server.url, "engine": "vllm", "service": "chat"}],
                                               timeout=1.0), node="gn1", boot_id="b1", clock=clock)
    spool = Spool(tmp_path / "spool.db")
    out = io.StringIO()
    engine = Engine(config=EngineConfig.model_validate({"slo": {"chat": {"error_rate": "1%"}}}))
    runner = Runner(engine, spool, Topics(""), json_out=out, record=None, notifier=None, state_key="t")

    def minutes(n: int, per_minute: int = 200, reason: str = "stop") -> None:
        for _ in range(n):
            for _ in range(per_minute):
                server.metrics.finish(MODEL, _req(reason))
            clock.t += 60
            asyncio.run(runner.batch(scraper.scrape_all()))

    try:
        minutes(30)
        with caplog.at_level(logging.WARNING, logger="gpuwarden.producers.inference"):
            server.mode = "garbage"
            minutes(3)
            server.mode = "http500"
            minutes(3)
            server.mode = "ok"
            server.restart()  # counters from zero: a reset, not a negative rate
            minutes(20)
        # away, garbage, a restart: only the restart recorded (info), no alert
        seen = [(t["rule"], t["tier"]) for t in map(json.loads, out.getvalue().splitlines())]
        assert set(seen) == {("inference-restarted", "info")}
        out.truncate(0)
        out.seek(0)
        assert any("no record this interval, nothing alerted" in r.message for r in caplog.records)
        minutes(10, reason="abort")  # every request aborted: failures at once; 1 h burn 100 x 9/60 > 14.4 by the 9th minute
    finally:
        scraper.stop()
        server.close()
    fired = {json.loads(line)["rule"] for line in out.getvalue().splitlines()}
    assert {"inference-failures", "slo-fast-burn"} <= fired
    rows = list(spool.read(topic="inference.metrics", since=0, until=clock.t + 1))
    spool.close()
    assert len(rows) >= 50


def test_live_run_and_replay_of_a_serving_scenario_are_byte_identical(tmp_path) -> None:
    """The inference stage in event time: `gpuwarden replay` of `run --record` gives the same bytes."""
    import subprocess
    import sys

    cfg = tmp_path / "gw.yaml"
    cfg.write_text(f"spool:\n  path: {tmp_path / 'spool.db'}\n"
                   "engine:\n  slo:\n    chat-errors: {error_rate: 1%}\n")
    rec = tmp_path / "in.jsonl"
    cli = [sys.executable, "-m", "gpuwarden.app.cli"]
    live = subprocess.run([*cli, "run", "--config", str(cfg), "--simulate", "serving-errors", "--gpus", "2",
                           "--duration", "90m", "--start", "1700000000", "--json", "--record", str(rec)],
                          capture_output=True, timeout=300, check=True)
    replay = subprocess.run([*cli, "replay", "--config", str(cfg), "--from-file", str(rec), "--json"],
                            capture_output=True, timeout=300, check=True)
    rules = {json.loads(x)["rule"] for x in live.stdout.splitlines()}
    assert {"inference-failures", "slo-fast-burn"} <= rules
    assert replay.stdout == live.stdout
