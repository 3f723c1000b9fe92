"""The inference stage and the service stage behind it: SLO burn-rate alerts over event-time
windows, with the SRE workbook's numbers worked by hand, and the composite serving rules on
hand-built records.

Workbook (https://sre.google/workbook/alerting-on-slos/): a 99.9 % objective over 30 days
allows 0.1 % bad requests, i.e. 43.2 minutes of total outage in the window. The pairs alert
when 2 % (1 h at 14.4x), 5 % (6 h at 6x) and 10 % (3 d at 1x) of that is spent: with 100 %
errors (a burn of 1000x) that is 0.864, 2.16 and 4.32 minutes of outage. Rules run when a
minute closes, so the stage says so at the 1st, 3rd and 5th minute.
"""

from __future__ import annotations

import pytest

from gpuwarden.contract import CounterDelta, GaugeValue, HistogramDelta, InferenceMetrics
from gpuwarden.producers.servingsim import TTFT_BOUNDS, LogNormal, expected_counts
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.inferencestage import InferenceStage
from gpuwarden.streams.servicestage import ServiceStage

T0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600  # an hour boundary
SLO = {"error_rate": "0.1%", "window": "30d"}
PREFILL_MIN = 3 * 24 * 60 + 60  # 3 d + 1 h of good traffic: every window is full before the burn


class Feed:
    """One service's records, one per minute (the interval ``[ts - 60, ts]``, ts mid-minute)."""

    def __init__(self, stage: InferenceStage, service: str = "chat") -> None:
        self.stage, self.service = stage, service
        self.minute, self.seq, self.out = 0, 0, []
        self.pid = 4242

    def record(self, *, ok: float = 0, failed: float = 0, ttft: tuple[list[int], float] | None = None,
               gauges: dict[str, float] | None = None, preempt: float = 0, reset: bool = False) -> InferenceMetrics:
        ts = T0 + self.minute * 60 + 30
        hist = [] if ttft is None else [HistogramDelta(
            name="ttft", metric="vllm:time_to_first_token_seconds", bounds=list(TTFT_BOUNDS), counts=ttft[0],
            count=sum(ttft[0]), sum=ttft[1], reset=reset)]
        counters = [CounterDelta(name="requests", metric="vllm:request_success", delta=ok, reset=reset),
                    CounterDelta(name="requests_failed", metric="vllm:request_success", delta=failed, reset=reset),
                    CounterDelta(name="preemptions", metric="vllm:num_preemptions", delta=preempt, reset=reset)]
        return InferenceMetrics(ts=ts, start_ts=ts - 60, node="gn1", seq=self.seq, boot_id="b1", engine="vllm",
                                service=self.service, model="m", url="http://127.0.0.1:8000/metrics", pid=self.pid,
                                histograms=hist, counters=counters,
                                gauges=[GaugeValue(name=k, metric=k, value=v) for k, v in (gauges or {}).items()])

    def minutes(self, n: int, **kw: object) -> list:
        """``n`` minutes of the same traffic; the transitions they gave (as (minute, rule, state))."""
        got = []
        for _ in range(n):
            rec = self.record(**kw)  # type: ignore[arg-type]
            got += [((t.ts - T0) / 60, t.rule, t.state.value, t) for t in self.stage.process(rec)]
            self.minute += 1
            self.seq += 1
        return got


class Stages(InferenceStage):
    """The inference stage with the service stage behind it, as the Engine runs them."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.fleet = ServiceStage(config)

    def process(self, record: InferenceMetrics) -> list:
        return self._fleet(super().process(record))

    def flush(self) -> list:
        return self._fleet(super().flush()) + self.fleet.flush()

    def _fleet(self, out: list) -> list:
        slis = self.take_slis()
        gate = self.watermark()  # as the Engine gates it
        for sli in slis:
            out += self.fleet.process(sli, gate)
        for service in self.fleet.services() if slis else ():
            out += self.fleet.release(service, gate)
        return out


def stage(**cfg: object) -> Stages:
    return Stages(EngineConfig.model_validate(cfg))


def test_full_outage_fires_the_three_pairs_at_the_workbook_times() -> None:
    """100 % errors: 1000x. Fast (1 h and 5 min at 14.4x): 1000 * 1/60 = 16.7 at the 1st
    minute. Slow (6 h and 30 min at 6x): 1000 * 2/360 = 5.56 at the 2nd, 8.33 at the 3rd.
    Steady (3 d and 6 h at 1x): 1000 * 4/4320 = 0.93 at the 4th, 1.16 at the 5th."""
    f = Feed(stage(slo={"chat": SLO}))
    assert f.minutes(PREFILL_MIN, ok=600) == []
    start = f.minute
    got = f.minutes(8, failed=600)
    # a transition's ts is the end of the minute it judged: minute - start = bad minutes so far
    fired = {rule: minute - start for minute, rule, state, _ in got if state == "firing" and rule.startswith("slo-")}
    assert fired == {"slo-fast-burn": 1, "slo-slow-burn": 3, "slo-steady-burn": 5, "slo-over-target": 1}
    fast = next(t for _, rule, _, t in got if rule == "slo-fast-burn")
    assert fast.tier.value == "critical" and fast.labels["objective"] == "error_rate"
    v = fast.evidence.values
    assert v["burn_long"] == pytest.approx(1000 / 60, rel=1e-4) and v["burn_short"] == pytest.approx(200.0)
    # one minute of full outage spends 1/43.2 of a 99.9 % budget over 30 d
    # (to 1e-5: the span seen starts with the first interval, 30 s before its minute)
    assert v["budget_remaining"] == pytest.approx(1 - 1 / 43.2, abs=1e-5)
    assert "97.7 % of the 30 d budget left" in fast.summary
    slow = next(t for _, rule, _, t in got if rule == "slo-slow-burn")
    assert slow.tier.value == "attention" and slow.evidence.values["burn_long"] == pytest.approx(1000 * 3 / 360, rel=1e-4)
    steady = next(t for _, rule, _, t in got if rule == "slo-steady-burn")
    assert steady.tier.value == "info"


def test_a_burn_of_17x_spends_two_percent_before_it_pages() -> None:
    """1.7 % errors against 0.1 %: 17x. Fast: 17 k/60 >= 14.4 first at k = 51 (50.8) minutes,
    when 17 * 51 / 43200 = 2.007 % of the budget is spent; slow: 17 k/360 >= 6 at k = 128
    (127.06); steady: 17 k/4320 >= 1 at k = 255 (254.1). Then the burn stops: after one clean
    minute the 5-minute window burns 17 * 4/5 = 13.6 < 14.4, so the fast pair resolves then
    (the short window is what makes it resolve soon), the slow one (30 min: 17 * 29/30 = 16.4)
    stays."""
    f = Feed(stage(slo={"chat": SLO}))
    f.minutes(PREFILL_MIN, ok=10_000)
    start = f.minute
    got = f.minutes(258, ok=9_830, failed=170)
    fired = {rule: minute - start for minute, rule, state, _ in got if state == "firing"}
    assert fired == {"slo-fast-burn": 51, "slo-slow-burn": 128, "slo-steady-burn": 255, "slo-over-target": 1}
    fast = next(t for _, rule, _, t in got if rule == "slo-fast-burn")
    assert fast.evidence.values["budget_remaining"] == pytest.approx(1 - 17 * 51 / 43200, abs=1e-5)
    stop = f.minute
    after = f.minutes(8, ok=10_000)
    resolved = {rule: minute - stop for minute, rule, state, _ in after if state == "resolved"}
    assert resolved == {"slo-fast-burn": 1}


def test_too_few_requests_is_not_a_burn_and_no_slo_means_no_burn_rule() -> None:
    f = Feed(stage(slo={"chat": SLO}))
    assert f.minutes(30, ok=1, failed=1) == []  # 60 events in the hour: under MIN_EVENTS
    g = Feed(stage())
    assert g.minutes(30, failed=600) != []  # the failure rule still holds without an SLO...
    assert not [r for _, r, _, _ in g.minutes(5, failed=600) if r.startswith("slo-")]


def _ttft(n: int, parts: list[tuple[float, LogNormal]]) -> tuple[list[int], float]:
    return expected_counts(n, parts, TTFT_BOUNDS)


BODY = [(1.0, LogNormal(0.2, 0.4))]
TAIL = [(0.97, LogNormal(0.14, 0.4)), (0.03, LogNormal(3.0, 0.2))]  # mean within 3 % of BODY's


def test_tail_rising_while_the_mean_is_flat_says_the_bucket_bounds() -> None:
    f = Feed(stage())
    f.minutes(70, ok=600, ttft=_ttft(600, BODY))
    got = f.minutes(15, ok=600, ttft=_ttft(600, TAIL))
    fired = [t for _, rule, state, t in got if rule == "inference-tail-rising" and state == "firing"]
    assert len(fired) == 1
    t = fired[0]
    assert t.tier.value == "attention" and t.labels["metric"] == "ttft"
    # honest: what the buckets say, the interpolation marked as such
    assert "p99 ≤ 5 s (in (2.5, 5] s; ≈" in t.summary and "interpolated" in t.summary
    assert "p99 ≤ 0.75 s (in (0.5, 0.75] s" in t.summary
    assert t.evidence.values["p99_upper"] == 5.0 and t.evidence.values["p99_ref_upper"] == 0.75
    assert abs(t.evidence.values["mean_s"] / t.evidence.values["mean_ref_s"] - 1) < 0.2


def test_tail_rising_comes_within_5_min_of_the_crossing() -> None:
    """Issue #30, point 6: the tail appears at the start of a minute (3 % of requests ~3 s: p99 past
    2.5 s within it); judged on 10 min and held 5 it fired 8 minutes later, now within 5."""
    f = Feed(stage())
    f.minutes(70, ok=600, ttft=_ttft(600, BODY))
    onset = f.minute
    got = f.minutes(15, ok=600, ttft=_ttft(600, TAIL))
    fired = [(minute, t) for minute, rule, state, t in got if rule == "inference-tail-rising" and state == "firing"]
    assert fired and fired[0][0] - onset <= 5
    assert "over the last 5 min against p99 ≤ 0.75 s" in fired[0][1].summary


#: The issue's server: TTFT p99 at 3-4 s against a 2.5 s objective, 1.5 % of requests over it (a
#: 1.5x burn of a 1 % budget, under every burn-rate pair's factor).
SLOWER = [(0.985, LogNormal(0.2, 0.4)), (0.015, LogNormal(3.5, 0.1))]
TTFT_SLO = {"ttft_p99": "2.5s", "window": "30d"}


def test_an_objective_over_its_target_for_5_min_is_attention_whatever_the_burn_rate() -> None:
    """Over the last 5 min 1.5 % of requests miss 2.5 s against 1 % allowed: attention once the
    5-min window is over target (the 4th minute), no burn-rate pair; it resolves 5 min after the
    window is back under."""
    f = Feed(stage(slo={"chat": TTFT_SLO}))
    assert f.minutes(70, ok=600, ttft=_ttft(600, BODY)) == []
    onset = f.minute
    got = f.minutes(6, ok=600, ttft=_ttft(600, SLOWER))
    assert [(minute - onset, rule) for minute, rule, state, _ in got if state == "firing"] == [(4, "slo-over-target")]
    t = next(t for _, rule, _, t in got if rule == "slo-over-target")
    assert t.tier.value == "attention" and t.labels["objective"] == "ttft_p99"
    assert t.evidence.window_s == 300 and t.evidence.values["burn"] == pytest.approx(1.5 * 4 / 5, rel=0.05)
    assert t.summary.startswith("chat: the ttft_p99 objective is over its target over the last 5 min: ")
    back = f.minute
    after = f.minutes(12, ok=600, ttft=_ttft(600, BODY))
    assert [(m - back, rule, state) for m, rule, state, _ in after] == [(6, "slo-over-target", "resolved")]


def test_an_objective_within_its_target_gives_no_over_target_alert() -> None:
    f = Feed(stage(slo={"chat": TTFT_SLO}))
    f.minutes(70, ok=600, ttft=_ttft(600, BODY))
    assert not f.minutes(20, ok=600, ttft=_ttft(600, [(0.995, LogNormal(0.2, 0.4)), (0.005, LogNormal(3.5, 0.1))]))


def test_everything_slower_is_not_the_tail_pitfall() -> None:
    """The mean doubles with the tail: the average shows it, so this rule stays quiet."""
    f = Feed(stage())
    f.minutes(70, ok=600, ttft=_ttft(600, BODY))
    got = f.minutes(15, ok=600, ttft=_ttft(600, [(1.0, LogNormal(0.6, 0.6))]))
    assert not [r for _, r, _, _ in got if r == "inference-tail-rising"]


def test_kv_knee_needs_a_full_cache_and_a_growing_queue() -> None:
    f = Feed(stage())
    assert f.minutes(20, ok=600, gauges={"kv_cache_usage": 0.95, "requests_waiting": 0}) == []
    got = f.minutes(12, ok=600, gauges={"kv_cache_usage": 0.95, "requests_waiting": 12})
    fired = [t for _, rule, state, t in got if rule == "inference-kv-knee" and state == "firing"]
    assert len(fired) == 1 and "add replicas or reduce max batch" in fired[0].action
    g = Feed(stage())  # a queue with room in the cache: not the knee
    assert not g.minutes(20, ok=600, gauges={"kv_cache_usage": 0.5, "requests_waiting": 12})


def test_batch_at_the_configured_maximum() -> None:
    f = Feed(stage(serving={"chat": {"max_batch": 64}}))
    got = f.minutes(12, ok=600, gauges={"requests_running": 64, "requests_waiting": 3})
    fired = [t for _, rule, state, t in got if rule == "inference-batch-full" and state == "firing"]
    assert len(fired) == 1 and "64 requests running of a configured maximum of 64" in fired[0].summary
    g = Feed(stage())  # no max configured: nothing to compare with
    assert not g.minutes(12, ok=600, gauges={"requests_running": 64, "requests_waiting": 3})


def test_preemptions_rising() -> None:
    f = Feed(stage())
    f.minutes(60, ok=600, preempt=0)
    got = f.minutes(10, ok=600, preempt=3)
    assert [r for _, r, s, _ in got if s == "firing"] == ["inference-preemptions"]


def test_restart_then_ttft_regression_against_its_own_hour_before() -> None:
    f = Feed(stage())
    f.minutes(60, ok=600, ttft=_ttft(600, BODY))
    f.pid = 4243  # a deploy: new process, counters from zero
    got = f.minutes(1, ok=600, ttft=_ttft(600, [(1.0, LogNormal(0.7, 0.4))]), reset=True)
    got += f.minutes(10, ok=600, ttft=_ttft(600, [(1.0, LogNormal(0.7, 0.4))]))
    fired = {r: t for _, r, s, t in got if s == "firing"}
    assert set(fired) == {"inference-restarted", "inference-ttft-regression"}
    assert fired["inference-restarted"].tier.value == "info" and fired["inference-restarted"].evidence.note == "pid 4242 → 4243"
    reg = fired["inference-ttft-regression"]
    assert "p90 ≤ 2.5 s (in (1, 2.5] s" in reg.summary and "p90 ≤ 0.5 s (in (0.25, 0.5] s" in reg.summary


def test_a_restart_with_the_same_latency_is_only_recorded() -> None:
    f = Feed(stage())
    f.minutes(60, ok=600, ttft=_ttft(600, BODY))
    got = f.minutes(1, ok=600, ttft=_ttft(600, BODY), reset=True) + f.minutes(20, ok=600, ttft=_ttft(600, BODY))
    assert {(r, s) for _, r, s, _ in got} == {("inference-restarted", "firing"), ("inference-restarted", "resolved")}


def test_a_server_away_for_an_hour_gives_no_alert() -> None:
    """The scraper publishes nothing while the server is away (or answers garbage): a gap."""
    f = Feed(stage(slo={"chat": {"ttft_p99": "2.5s", "error_rate": "1%"}}))
    assert f.minutes(30, ok=600, ttft=_ttft(600, BODY)) == []
    f.minute += 60
    assert f.minutes(30, ok=600, ttft=_ttft(600, BODY)) == []


def test_duplicates_late_records_and_dump_load_replay_the_same() -> None:
    """Out of order within the lateness, repeated, dumped and loaded halfway: the same
    transitions as in order (replay equals live)."""
    cfg = {"slo": {"chat": SLO}}

    def records() -> list[InferenceMetrics]:
        f = Feed(stage())
        out = []
        for n in range(90):
            out.append(f.record(ok=600, failed=600 if 60 <= n < 70 else 0))
            f.minute += 1
            f.seq += 1
        return out

    straight = stage(**cfg)
    want = [t for r in records() for t in straight.process(r)] + straight.flush()
    assert want
    recs = records()
    shuffled = []
    for a, b in zip(recs[0::2], recs[1::2]):  # each pair swapped (60 s apart), the older one twice
        shuffled += [b, a, a]
    first = stage(**cfg)
    got = [t for r in shuffled[:90] for t in first.process(r)]
    second = stage(**cfg)
    second.load("gn1", first.dump("gn1"))
    second.fleet.load("chat", first.fleet.dump("chat"))  # the service stage's state too
    got += [t for r in shuffled[90:] for t in second.process(r)] + second.flush()
    assert got == want
    assert first.counters()["inference_duplicates"] == 30 and second.counters()["inference_duplicates"] == 15
