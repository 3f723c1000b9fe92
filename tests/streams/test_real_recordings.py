"""The default rules on real H200 recordings: what really happened there, and nothing else.

* ``tests/fixtures/h200/h200-agent.jsonl``: the agent's 60 s on a real H200 (bench/h200_probe.sh)
  while ``bench/h200_load.py`` ran 250 steps: each step 20 ms in its data block
  (``time.sleep(0.02)``) of a ~48 ms step (42 %), +64 MiB kept every 10 steps and across its one
  checkpoint (1,600 MiB kept), the SW power cap bit (0x4) in 47 of 60 samples at 228-259 of 700 W
  with the SM clock at 1,905-1,965 of 1,980 MHz.
* ``tests/fixtures/h200-leak-probe/``: 21 s of raw 10 Hz NVML samples of a PyTorch child keeping
  256 MiB more every ~0.25 s for 12 s (a leak), converted by ``gpuwarden.history.nvmltrace``;
  0x4 in 121 of 210 samples at 119-238 W, SM clock 1,725-1,980 MHz (2.4 % below max on average).

Both are shorter than the rules' windows, so each is also replayed time-dilated
(``tests/streams/real_recordings.py`` says how).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwarden.contract import encode
from gpuwarden.history.nvmltrace import TraceError, TraceFacts, snapshots
from gpuwarden.units import parse_time
from tests.streams.real_recordings import AGENT, PROBE, PROBE_RAW, REAL_RECORDINGS, dilate, firing, records, run

#: How the committed probe records were made (its README says where each fact comes from).
PROBE_START = "2026-11-30T00:00:00Z"
PROBE_FACTS = TraceFacts("h200-probe", "GPU-trace-0", "NVIDIA H200", sm_max_mhz=1980, power_limit_w=700,
                         mem_total_mib=143771)


def test_the_converted_probe_is_what_the_converter_makes_of_the_raw_trace() -> None:
    start = parse_time(PROBE_START, 0.0)
    assert start is not None
    with PROBE_RAW.open() as f:
        made = [encode(s) for s in snapshots(f, start, PROBE_FACTS)]
    assert made == PROBE.read_bytes().splitlines()
    samples = [json.loads(line) for line in PROBE_RAW.read_text().splitlines()[1:]]
    snaps = records(PROBE)
    assert len(snaps) == len(samples) == 210
    g = snaps[100].gpus.rows()[0]
    s = samples[100]
    assert (g.util_gpu, g.mem_used_bytes >> 20, g.power_w, g.temp_gpu_c, g.clock_sm_mhz, g.clock_event_reasons) == \
        (s["util"], s["mem_used_mib"], s["power_w"], s["temp_c"], s["sm_mhz"], s["reasons"])
    assert [(p.pid, p.used_memory_bytes >> 20) for p in snaps[100].processes.rows()] == [tuple(x) for x in s["procs"]]
    assert snaps[100].ts - snaps[0].ts == pytest.approx(s["t"])


def test_a_line_that_is_not_a_sample_is_refused_with_its_line_number() -> None:
    with pytest.raises(TraceError, match="line 2: not a trace sample"):
        list(snapshots(['{"about": "x"}', '{"util": 3}'], 0.0, PROBE_FACTS))
    with pytest.raises(TraceError, match="line 1: not JSON"):
        list(snapshots(["{"], 0.0, PROBE_FACTS))


@pytest.mark.parametrize("path", [AGENT, PROBE], ids=["h200-agent", "h200-leak-probe"])
def test_at_their_own_speed_the_recordings_are_too_short_for_any_rule(path: Path) -> None:
    assert run(records(path)) == []


@pytest.mark.parametrize("name", sorted(REAL_RECORDINGS))
def test_dilated_the_recordings_fire_what_really_happened_and_nothing_else(name: str) -> None:
    """h200-agent ×20 (20 min): the load's data wait (42 % of each step, by construction) and the
    memory it keeps across its checkpoint are attention. h200-leak-probe ×60 (21 min): 256 MiB
    kept every 0.25 s (15 s dilated) for 12 s (12 min) is the leak it was. Nothing critical, and
    no clock-capped: the SW power cap bit costs 0.6 % and 1.6 % of the clock there, under the
    rule's 10 % (the bit alone is not a cap that costs the work anything)."""
    path, k, fired = REAL_RECORDINGS[name]
    assert firing(run(dilate(records(path), k))) == {(rule, "attention") for rule in fired}


@pytest.mark.parametrize(("path", "k", "low", "high"), [(AGENT, 20, 0.004, 0.01), (PROBE, 60, 0.01, 0.025)],
                         ids=["h200-agent", "h200-leak-probe"])
def test_the_real_sw_power_cap_samples_make_the_info_alert_once_the_share_is_below_their_cost(
        path: Path, k: float, low: float, high: float) -> None:
    """The same mechanism on real bits and clocks: with the share at 0.5 % the cap the recordings
    really show (0x4, SM clock a little under 1,980 MHz) is an info alert stating that cost."""
    got = [t for t in run(dilate(records(path), k), share=0.005) if t.rule == "clock-capped"]
    assert [(t.state, t.tier) for t in got][:1] == [("firing", "info")]
    assert low <= got[0].evidence.values["cap_clock_loss_avg"] <= high
    assert got[0].evidence.values["clock_sm_max_mhz"] == 1980 and got[0].evidence.values["power_limit_w"] == 700
