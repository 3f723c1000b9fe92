"""``gpuwarden replay --baselines SPOOL``: a replay judged against bootstrapped class baselines.

Before, ``replay`` always started from fresh state, so a bootstrap (``gpuwarden baseline
bootstrap``) or an imported site's state reached only ``gpuwarden run`` and a retro of a short
recording showed every class "learning" (docs/replay.md said to import a site's state to draw
bands, which the replay never read). The recordings are those of
tests/streams_kafka/test_bootstrap_kafka.py (2 h healthy, then 40 min of dataloader-starvation),
at a fixed start.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpuwarden.app.settings import load_settings
from gpuwarden.app.standalone import LIVE_STATE, STATE_NS
from gpuwarden.contract import AlertTransition, decode, encode
from gpuwarden.history.sources import read_file
from gpuwarden.spool import Spool
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import load_rules
from tests.history.builders import gw

START = 1796119200  # 2026-12-01 10:00 UTC: the simulated serving load rises through the starved 40 min
# (it falls below vllm-serve's band for starts at 03:00-04:00 or 15:00-16:00 UTC: a 12 h sine)
ENGINE = "engine:\n  observation_period: 45m\n"


def _record(tmp: Path, scenario: str, start: int, span: str, *extra: str) -> Path:
    out, cfg = tmp / f"{scenario}.jsonl", tmp / f"{scenario}.yaml"
    cfg.write_text(f"spool:\n  path: {tmp / scenario / 'spool.db'}\n{ENGINE}")
    done = gw("run", "--config", str(cfg), "--simulate", scenario, "--nodes", "2", "--duration", span,
              "--start", str(start), "--record", str(out), *extra)
    assert done.returncode == 0, done.stderr
    return out


def _deviations(lines: list[str]) -> list[tuple[str, str, str, float]]:
    out = []
    for line in lines:
        t = decode(line.encode(), AlertTransition)
        if t.rule == "util-below-baseline":
            out.append((t.state.value, t.labels["task_class"], t.labels["task"], t.ts))
    return out


def test_replay_judges_against_bootstrapped_baselines(tmp_path: Path) -> None:
    healthy = _record(tmp_path, "healthy", START, "2h")
    starved = _record(tmp_path, "dataloader-starvation", START + 7200, "40m", "--onset", "3m")
    boot = tmp_path / "boot.yaml"
    boot.write_text(f"spool:\n  path: {tmp_path / 'boot' / 'spool.db'}\n{ENGINE}")
    done = gw("baseline", "--config", str(boot), "bootstrap", "--from-file", str(healthy), "--since", str(START),
              "--until", str(START + 7200))
    assert done.returncode == 0 and "sd-finetune: 1 h 59 min; baseline util" in done.stdout, done.stderr

    # Without the bootstrap every class is still learning (45 min observation period, 40 min replayed).
    plain = gw("replay", "--config", str(boot), "--from-file", str(starved), "--json")
    assert plain.returncode == 0, plain.stderr
    assert _deviations(plain.stdout.splitlines()) == []

    replay = gw("replay", "--config", str(boot), "--from-file", str(starved), "--json",
                "--baselines", str(tmp_path / "boot"))
    assert replay.returncode == 0, replay.stderr
    assert "5 task classes start from the saved baselines" in replay.stderr, replay.stderr
    fired = [d for d in _deviations(replay.stdout.splitlines()) if d[0] == "firing"]
    assert [d[1] for d in fired] == ["sd-finetune"], fired

    # Exactly the one-process engine's transitions from the bootstrapped state (its classes).
    settings = load_settings(boot)
    engine = Engine(load_rules(settings.engine.rules), settings.engine, settings.limits.max_past_skew)
    with Spool(settings.spool.path) as spool:
        state = json.loads(spool.kv_get(STATE_NS, LIVE_STATE) or b"{}")
    assert state["nodes"] == {}  # the bootstrap keeps no node state
    for c, v in state["classes"].items():
        engine.classes.load(c, v.encode())
    expected = []
    for r in read_file(starved):
        expected += engine.process(r)
    expected += engine.flush()
    assert replay.stdout.splitlines() == [encode(t).decode() for t in expected]


def test_a_spool_without_saved_state_is_a_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "empty.yaml"
    cfg.write_text(f"spool:\n  path: {tmp_path / 'empty' / 'spool.db'}\n")
    (tmp_path / "empty").mkdir()
    Spool(tmp_path / "empty" / "spool.db").close()
    recording = tmp_path / "none.jsonl"
    recording.write_text("")
    r = gw("replay", "--config", str(cfg), "--from-file", str(recording), "--baselines", str(tmp_path / "empty"))
    assert r.returncode == 2 and "no saved engine state" in r.stderr, r.stderr
