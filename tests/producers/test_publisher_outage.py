"""Spool-first publishing through a real broker outage: no record lost, none out of order.

Uses its own broker (``KAFKA_LOCAL_DIR=<tmp> scripts/kafka-local start``) since it
stops it. ``kafka-local start`` formats fresh storage on a new port every time,
so the restart re-executes the broker's own command line (same
server.properties: same port, same data) instead of calling ``start`` again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer

from gpuwarden.contract import NodeSnapshot, Topics, decode
from gpuwarden.spool import Spool
from producers.publisher import Publisher
from producers.simulator import Simulator
from tests.kafka_support import create_topic, kafka_local

OUTAGE_S = 20.0


def _wait_port(bootstrap: str, up: bool, timeout: float) -> None:
    import socket
    host, port = bootstrap.rsplit(":", 1)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                if up:
                    return
        except OSError:
            if not up:
                return
        time.sleep(0.2)
    raise TimeoutError(f"broker at {bootstrap} did not go {'up' if up else 'down'} in {timeout:.0f}s")


def _terminate(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.2)
    os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def own_broker(tmp_path):
    env = {"KAFKA_LOCAL_DIR": str(tmp_path / "kafka")}
    proc = kafka_local("start", env=env)
    if proc.returncode != 0:
        pytest.fail(f"could not start a second broker: {proc.stderr.strip()}", pytrace=False)
    state = json.loads((tmp_path / "kafka" / "run" / "state.json").read_text())
    broker = {"bootstrap": state["bootstrap"], "pid": int(state["pid"]),
              "run_dir": tmp_path / "kafka" / "run"}
    broker["argv"] = open(f"/proc/{broker['pid']}/cmdline", "rb").read().split(b"\0")[:-1]
    try:
        yield broker
    finally:
        _terminate(broker["pid"])


def _restart(broker: dict) -> None:
    with open(broker["run_dir"] / "broker.log", "ab") as log:
        p = subprocess.Popen(broker["argv"], cwd=broker["run_dir"], stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    broker["pid"] = p.pid
    _wait_port(broker["bootstrap"], True, 90)


async def _consume_all(bootstrap: str, topic: str, expect: int, timeout: float = 60) -> list:
    c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"t-{uuid.uuid4().hex[:8]}",
                         auto_offset_reset="earliest", enable_auto_commit=False)
    await c.start()
    out: list = []
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            batch = await c.getmany(timeout_ms=1000)
            for msgs in batch.values():
                out.extend(m.value for m in msgs)
            if len(out) >= expect and not batch:
                break
    finally:
        await c.stop()
    return out


@pytest.mark.kafka
async def test_outage_loses_nothing_and_backfills_in_order(own_broker, tmp_path):
    bootstrap = own_broker["bootstrap"]
    topics = Topics(prefix=f"outage-{uuid.uuid4().hex[:8]}.")
    for t in (topics.samples, topics.events, topics.metrics):
        await create_topic(bootstrap, t)
    spool = Spool(tmp_path / "spool.db")
    pub = Publisher(spool, bootstrap, topics, send_timeout_s=3.0)
    sim = Simulator("healthy", nodes=1, gpus=2, start_ts=time.time() - 3600, tick_s=1.0)
    ticks = 0
    pending_during_outage = 0

    async def tick_for(seconds: float) -> None:
        nonlocal ticks
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pub.submit(sim.step())
            ticks += 1
            await pub.pump()
            await asyncio.sleep(0.25)

    try:
        await tick_for(5)
        assert pub.published > 0
        _terminate(own_broker["pid"])
        _wait_port(bootstrap, False, 30)
        await tick_for(OUTAGE_S)  # sampling goes on; the spool grows
        pending_during_outage = spool.pending_count()
        assert pending_during_outage > 0 and pub.failures > 0
        _restart(own_broker)
        await tick_for(5)
        end = time.monotonic() + 90
        while spool.pending_count() and time.monotonic() < end:
            if not await pub.pump():
                await asyncio.sleep(0.5)
        assert spool.pending_count() == 0
    finally:
        await pub.close()
        spool.close()

    values = await _consume_all(bootstrap, topics.samples, ticks)
    snaps = [decode(v, NodeSnapshot) for v in values]
    seqs = [s.seq for s in snaps]
    unique = sorted(set(seqs))
    assert unique == list(range(ticks)), "every seq exactly once after dedup, no gap"
    assert len({s.boot_id for s in snaps}) == 1
    first_seen = list(dict.fromkeys(seqs))
    assert first_seen == unique, "backfill kept the order"
    print(f"ticks={ticks} spooled during outage={pending_during_outage} "
          f"delivered={len(seqs)} duplicates={len(seqs) - len(unique)}")
