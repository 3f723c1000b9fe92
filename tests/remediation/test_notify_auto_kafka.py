"""Cluster mode: ``gpuwarden notify`` on the real broker applies the operator's auto policy to the
alerts it consumes (the command backend standing in for the site's drain tool): the listed rule's
alert drains its node once, recorded in the worker's spool as ``auto:<rule>``; another rule's
alert is left for a person."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
import yaml

from gpuwarden.app.cli import build_parser
from gpuwarden.app.remediate import AutoPolicy
from gpuwarden.app.settings import load_settings
from gpuwarden.contract import Topics, encode
from gpuwarden.notifiers.worker import Stats, run_notify
from gpuwarden.remediation.act import audit_trail
from gpuwarden.spool import Spool
from tests.hang import HANG_S
from tests.kafka_support import create_topic, produce, unique_topic
from tests.remediation.support import alert
from tests.remediation.test_command_auto import TOOL

pytestmark = pytest.mark.kafka


async def test_gpuwarden_notify_drains_what_the_policy_names(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = unique_topic("rem") + "."
    tool = tmp_path / "tool.py"
    tool.write_text(TOOL)
    run = [sys.executable, str(tool)]
    cfg = tmp_path / "gpuwarden.yaml"
    cfg.write_text(yaml.safe_dump({
        "kafka": {"bootstrap": kafka_bootstrap, "topic_prefix": prefix},
        "spool": {"path": str(tmp_path / "spool.db")},
        "notify": {"consumer_group": f"notify-{prefix}", "tick_interval": "200ms"},
        "remediation": {"backend": "command", "auto": ["xid-node-repeated"], "command": {
            "drain": [*run, "drain", "{node}", "{reason}"], "resume": [*run, "resume", "{node}"],
            "status": [*run, "status", "{node}"]}}}))
    assert build_parser().parse_args(["notify", "--config", str(cfg)]).handler == "gpuwarden.app.remediate:cmd_notify"
    settings = load_settings(cfg)
    topics = Topics(prefix)
    await create_topic(kafka_bootstrap, topics.alerts, partitions=2)
    now = time.time()
    repeated, hardware = alert("gn2", "xid-node-repeated", ts=now), alert("gn1", "xid-hardware", ts=now)
    await produce(kafka_bootstrap, topics.alerts, [(t.fingerprint.encode(), encode(t)) for t in (hardware, repeated)])
    stop, stats = asyncio.Event(), Stats()
    worker = asyncio.create_task(run_notify(settings, stop=stop, stats=stats, on_routed=AutoPolicy.of(settings)))
    try:
        deadline = time.monotonic() + HANG_S
        while stats.consumed < 2 or not (tmp_path / "gn2.drained").exists():
            assert time.monotonic() < deadline and not worker.done(), "the worker did not drain gn2"
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(worker, HANG_S)
    assert not (tmp_path / "gn1.drained").exists()
    with Spool(tmp_path / "spool.db") as spool:
        trail = list(audit_trail(spool, Topics(prefix)))
    assert [(r.node, r.outcome.value, r.by) for r in trail] == [("gn2", "done", "auto:xid-node-repeated")]
