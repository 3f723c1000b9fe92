"""One recorded live run, shared by the replay and report tests."""

from __future__ import annotations

import json

import pytest

from tests.history.builders import config, gw


#: 2026-12-06 04:00 UTC: the recorded hour's start (fixed: the hour must not depend on when the suite runs).
START = 1796529600
#: 2026-12-06 04:47:55 UTC: an hour whose live run fires inference-batch-full (at 05:14:00).
BATCH_FULL_START = 1796532475


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> dict:
    """``gpuwarden run`` of the mixed scenario (2 nodes x 4 GPUs, 1 h) with --record: transitions, file, spool."""
    tmp = tmp_path_factory.mktemp("live")
    cfg = config(tmp)
    rec = tmp / "run.jsonl"
    r = gw("run", "--config", cfg, "--simulate", "mixed", "--nodes", "2", "--gpus", "4", "--duration", "1h",
           "--start", str(START), "--json", "--record", str(rec))
    assert r.returncode == 0, r.stderr
    live = r.stdout.splitlines()
    rules = {json.loads(x)["rule"] for x in live}
    assert len(rules) >= 4, f"the mixed scenario should fire several rules, got {rules}"
    return {"tmp": tmp, "cfg": cfg, "file": rec, "live": live}
