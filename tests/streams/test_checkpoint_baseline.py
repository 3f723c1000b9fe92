"""util-below-baseline on a healthy job that checkpoints (issue #18, defect 1).

The class baseline is a median of per-minute summaries; the task used to be judged by the
mean of its last 15 of them. A job that spends 3 min of every 15 min writing checkpoints at
~0 % (the recording's 3 s in every 15 s, dilated 60x; a large model's checkpoint) has a median
minute of ~97 % and a mean of ~78 %: the mean fell below the band floor (97 - 15) and attention
fired once the class left its observation period, then stayed open. Judged by the same
estimator (the median) over the same per-minute values, and with SDK checkpoint buckets left
out of both, it stays quiet; a real data-loader starvation afterwards still fires.
"""

from __future__ import annotations

import pytest

from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine

from tests.streams.traces import T0, trace

HOUR = 3600
STARVE_AT = 2.5 * HOUR  # the job starves for data from here on (util 97 % -> 45 %)
CONFIG = EngineConfig(observation_period=HOUR)


def _util(starve: bool):
    return lambda t: 45.0 if starve and t >= STARVE_AT else 97.0


def _long_checkpoints(t: float) -> bool:
    return t % 900 >= 720  # the last 3 min of every 15 min


def _short_checkpoints(t: float) -> bool:
    return t % 15 >= 12  # the last 3 s of every 15 s


def _firings(seconds: int, starve: bool, checkpoints, sdk: bool) -> list:
    engine = Engine(config=CONFIG)
    out = engine.process_many(trace(seconds, _util(starve), lambda t: 40.0, checkpoints=checkpoints, sdk=sdk))
    out += engine.flush()
    return [t for t in out if t.rule == "util-below-baseline" and t.state.value == "firing"]


@pytest.mark.parametrize("checkpoints", [_long_checkpoints, _short_checkpoints], ids=["3min-per-15min", "3s-per-15s"])
@pytest.mark.parametrize("sdk", [False, True], ids=["inferred", "sdk-records"])
def test_healthy_checkpointing_job_leaves_its_observation_period_quietly(checkpoints, sdk: bool) -> None:
    assert _firings(int(STARVE_AT), starve=False, checkpoints=checkpoints, sdk=sdk) == []


@pytest.mark.parametrize("sdk", [False, True], ids=["inferred", "sdk-records"])
def test_starvation_after_healthy_checkpoints_still_fires(sdk: bool) -> None:
    fired = _firings(int(STARVE_AT + HOUR), starve=True, checkpoints=_long_checkpoints, sdk=sdk)
    assert len(fired) == 1
    delay = fired[0].ts - (T0 + STARVE_AT)
    assert 0 < delay <= 30 * 60
    ev = fired[0].evidence
    assert ev.values["util_gpu"] < ev.baseline.low
