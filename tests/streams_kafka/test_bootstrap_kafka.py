"""``gpuwarden baseline bootstrap --to-kafka``: class baselines from a recording reach real
``gpuwarden streams`` workers through their class-state changelog (issue #18, defect 7, cluster
mode: before, only ``gpuwarden run`` restored a bootstrap, and a Kafka site still waited out the
observation period).

Two fleets (topic prefixes) get the same starved job (``dataloader-starvation``) after a healthy
recording: the one bootstrapped from that recording alerts ``util-below-baseline``; the other's
class is still learning (observation period 45 min, the run 40 min) and does not.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from gpuwarden.contract import AlertTransition, TaskSummary, Topics, decode
from gpuwarden.history.sources import read_file
from gpuwarden.kafka import produce_records
from gpuwarden.streams.keyed import unpack
from gpuwarden.streams.progress import is_progress
from gpuwarden.streams.statewire import CLASS_TABLE, changelog_topic, partition_of
from gpuwarden.streams.statewire import MAX_RECORD_BYTES, app_id
from tests.kafka_support import REPO_ROOT, topic_config
from tests.streams_kafka.records import settings_for
from tests.streams_kafka.workers import group_members, read_to_end, wait_for, workers, write_config

pytestmark = pytest.mark.kafka

PARTITIONS = 3
ENGINE = {"observation_period": "45m", "commit_interval": "1s"}


def gw(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", *args], capture_output=True, text=True,
                          cwd=REPO_ROOT, timeout=120)


def record(tmp: Path, scenario: str, start: float, span: str, *extra: str) -> Path:
    """A ``gpuwarden run --simulate`` recording (its own spool: no simulator state carried over)."""
    out = tmp / f"{scenario}.jsonl"
    cfg = tmp / f"{scenario}.yaml"
    cfg.write_text(f"spool:\n  path: {tmp / scenario / 'spool.db'}\nengine:\n  observation_period: 45m\n")
    done = gw("run", "--config", str(cfg), "--simulate", scenario, "--nodes", "2", "--duration", span,
              "--start", str(int(start)), "--record", str(out), *extra)
    assert done.returncode == 0, done.stderr
    return out


async def stage2_alerts(bootstrap: str, prefix: str) -> list[AlertTransition]:
    return [decode(r.value, AlertTransition)
            for r in await read_to_end(bootstrap, Topics(prefix).alerts, PARTITIONS)]


async def test_bootstrapped_baselines_reach_the_stream_workers(kafka_bootstrap: str, tmp_path: Path) -> None:
    began = time.monotonic()
    # Within limits.max_past_skew (7 d: older is dead-lettered), at 10:00 or 22:00 UTC: the
    # simulator's serving load is a 12 h sine of the hour, rising through the starved 40 min from
    # there. From other starts (03:00-04:30 UTC and 12 h later) vllm-serve's load falls below its
    # bootstrapped band too, and the one-process Engine fires util-below-baseline for it as well
    # (tests/app/test_replay_baselines.py pins the same start for the replay).
    now = time.time() - 3 * 3600
    start = now - (now - 10 * 3600) % (12 * 3600)
    healthy = record(tmp_path, "healthy", start, "2h")
    starved = record(tmp_path, "dataloader-starvation", start + 7200, "40m", "--onset", "3m")
    boot, fresh = (settings_for(kafka_bootstrap, partitions=PARTITIONS, **ENGINE) for _ in range(2))
    boot_cfg = write_config(tmp_path / "boot.yaml", boot)
    fresh_cfg = write_config(tmp_path / "fresh.yaml", fresh)

    done = gw("baseline", "--config", str(boot_cfg), "bootstrap", "--from-file", str(healthy),
              "--since", str(int(start)), "--to-kafka")
    assert done.returncode == 0, done.stderr
    assert "sd-finetune: 1 h 59 min; baseline util" in done.stdout, done.stdout
    topic = changelog_topic(app_id(boot), CLASS_TABLE)
    assert f"state to {topic}" in done.stdout, done.stdout
    # As faust makes it, keyed and partitioned as the workers read it, offsets {} (applies everything after).
    config = await topic_config(kafka_bootstrap, topic)
    assert config["cleanup.policy"] == "compact" and config["max.message.bytes"] == str(MAX_RECORD_BYTES)
    stored = await read_to_end(kafka_bootstrap, topic, PARTITIONS)
    assert {r.key.decode() for r in stored} >= {"sd-finetune", "bert-finetune", "resnet-train"}
    for r in stored:
        assert r.partition == partition_of(r.key, PARTITIONS) and unpack(r.value)[0] == {}
    # A second bootstrap would overwrite state the workers hold: asked for, nothing written.
    again = gw("baseline", "--config", str(boot_cfg), "bootstrap", "--from-file", str(healthy),
               "--since", str(int(start)), "--to-kafka")
    assert again.returncode == 2 and "--replace" in again.stderr and "sd-finetune" in again.stderr, again.stderr
    assert len(await read_to_end(kafka_bootstrap, topic, PARTITIONS)) == len(stored)

    records = list(read_file(starved))
    (tmp_path / "b").mkdir()
    (tmp_path / "f").mkdir()
    with workers(boot_cfg, tmp_path / "b", "b1") as (wb,), workers(fresh_cfg, tmp_path / "f", "f1") as (wf,):
        for s in (boot, fresh):
            async def joined(s=s) -> bool:  # type: ignore[no-untyped-def]
                return await group_members(kafka_bootstrap, app_id(s)) == 1

            await wait_for(joined, f"worker of {s.kafka.topic_prefix} in its group")
        # Running workers would not load a bootstrap (they read the changelog at an assignment)
        # and would write over it: refused even with --replace.
        running = gw("baseline", "--config", str(boot_cfg), "bootstrap", "--from-file", str(healthy),
                     "--since", str(int(start)), "--to-kafka", "--replace")
        assert running.returncode == 2 and "stop them" in running.stderr, running.stderr
        for s in (boot, fresh):
            await produce_records(records, {"bootstrap_servers": kafka_bootstrap}, s.kafka.topic_prefix,
                                  partitions=s.kafka.partitions, event_time=True)

        async def deviation(prefix: str, task_class: str | None = "sd-finetune") -> list[AlertTransition]:
            return [t for t in await stage2_alerts(kafka_bootstrap, prefix)
                    if t.rule == "util-below-baseline" and t.state.value == "firing"
                    and task_class in (None, t.labels["task_class"])]

        async def fired() -> bool:
            return bool(await deviation(boot.kafka.topic_prefix))

        try:
            await wait_for(fired, "util-below-baseline from the bootstrapped fleet's worker", poll=1)
        except TimeoutError:
            print(wb.tail())
            raise
        # The starved class's first firing (a later task of the class may fire too by the time
        # they are read); no other class deviates from this start.
        firings = await deviation(boot.kafka.topic_prefix, None)
        assert {t.labels["task_class"] for t in firings} == {"sd-finetune"}, firings
        alert = min(firings, key=lambda t: t.ts)

        # The other fleet's worker applied every summary up to 10 min of event time past the
        # alert (its commits passed them: an input offset commits only once the state it changed
        # is checkpointed; the last summaries may wait for stage 1's progress) and its class is
        # still learning: no deviation alert. Its stage 1 may still be behind when the other fleet
        # alerts (both workers share a busy machine): first wait until it has written summaries past
        # that point (or past 5 min before the recording's end, if that comes first).
        summaries = Topics(fresh.kafka.topic_prefix).summaries
        need: dict[int, int] = {}
        recorded_until = max(r.ts for r in records)

        async def summarised() -> bool:
            need.clear()
            latest = 0.0
            for r in await read_to_end(kafka_bootstrap, summaries, PARTITIONS):
                if not is_progress(r.headers):
                    ts = decode(r.value, TaskSummary).ts
                    latest = max(latest, ts)
                    if ts <= alert.ts + 600:
                        need[r.partition] = r.offset + 1
            return latest >= min(alert.ts + 600, recorded_until - 300)

        try:
            await wait_for(summarised, "the fresh fleet's summaries past 10 min after the alert", poll=1)
        except TimeoutError:
            print(wf.tail())
            raise

        async def caught_up() -> bool:
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
            await admin.start()
            try:
                committed = await admin.list_consumer_group_offsets(app_id(fresh))
            finally:
                await admin.close()
            mine = {tp.partition: m.offset for tp, m in committed.items() if tp.topic == summaries}
            return all(mine.get(p, -1) >= o for p, o in need.items())

        assert need
        try:
            await wait_for(caught_up, f"the fresh fleet's worker through the summaries {need}", poll=1)
        except TimeoutError:
            print(wf.tail())
            raise
        assert not await deviation(fresh.kafka.topic_prefix, None)  # every class still learning
        assert {t.labels["task_class"] for t in await deviation(boot.kafka.topic_prefix, None)} == {"sd-finetune"}
        assert any(t.rule == "data-loader-starvation" for t in await stage2_alerts(kafka_bootstrap,
                                                                                  fresh.kafka.topic_prefix))
    print(f"bootstrap --to-kafka: {len(stored)} classes, {len(records)} records per fleet, "
          f"alert at {alert.ts - start - 7200:.0f} s of event time, {time.monotonic() - began:.0f} s in all")
