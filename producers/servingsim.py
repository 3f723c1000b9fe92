"""Simulated vLLM services: ``inference_metrics/1`` records as the agent's scraper would publish.

One service per serving scenario, each a vLLM 0.10.2 server (its bucket bounds, from
``vllm/v1/metrics/loggers.py``) scraped every :data:`SCRAPE_S`. Requests arrive with a
diurnal load; per interval the bucket counts are the expected counts of a log-normal
latency (its CDF at each bound, rounded), so a 7-day run costs no per-request sampling and
the quantiles are known exactly. Deterministic for a seed, event time only.

Faults start :data:`ONSET_S` after the start (the rules compare with the hour before):
``serving-tail`` 3 % of requests ~3 s slow while the others speed up so the mean stays flat;
``serving-kv-knee`` 16 req/s more over 10 min into a full KV cache (queue, preemptions);
``serving-deploy`` a restart (new pid, counters from zero) with TTFT x3.5; ``serving-errors``
60 % of requests aborted for 20 min; ``serving-batch-full`` 8 req/s more over 10 min into its
small max batch (48): the batch is full, requests wait, the KV cache has room;
``serving-replicas`` one service with a replica on every node, the first of which (``faulty``)
aborts 60 % of its requests.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from gpuwarden.contract import CounterDelta, GaugeValue, HistogramDelta, InferenceMetrics

SCRAPE_S = 15.0
ONSET_S = 70 * 60.0
# vLLM v0.10.2, vllm/v1/metrics/loggers.py (PrometheusStatLogger): the buckets it declares.
TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BOUNDS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
              20.0, 40.0, 80.0)
E2E_BOUNDS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
              120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
MODEL = "qwen2-72b"
BASE_RATE = 8.0  # requests/s at the daily mean
TOKENS_OUT = 200.0  # generated tokens per request
KV_PER_RATE = 0.05  # KV cache used per req/s of load: 60 % at the diurnal peak (12 req/s)
#: Service name per serving scenario; ``SLO`` is what ``gpuwarden run --simulate`` judges them by
#: when the config declares none for them.
SERVICES = {"serving-healthy": "chat", "serving-tail": "chat-tail", "serving-kv-knee": "chat-knee",
            "serving-deploy": "chat-deploy", "serving-errors": "chat-errors", "serving-batch-full": "chat-batch",
            "serving-replicas": "chat-replicas"}
#: Each service's configured max batch (vLLM ``max_num_seqs``): chat-batch runs with a small one.
MAX_BATCH = {service: 48 if service == "chat-batch" else 256 for service in SERVICES.values()}
E2E_MEDIAN_S = 4.2  # running requests = arrival rate x time in the server (Little's law)
SLO = {"ttft_p99": "2.5s", "itl_p99": "100ms", "error_rate": "1%", "window": "30d"}


@dataclass(frozen=True)
class LogNormal:
    median: float
    sigma: float

    def cdf(self, x: float) -> float:
        return 0.5 * (1 + math.erf(math.log(x / self.median) / (self.sigma * math.sqrt(2))))

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma ** 2 / 2)


def expected_counts(n: float, parts: list[tuple[float, LogNormal]], bounds: tuple[float, ...]) -> tuple[list[int], float]:
    """Bucket counts (rounded expected) of ``n`` observations from a mixture, and their sum."""
    cum = [sum(w * d.cdf(b) for w, d in parts) for b in bounds] + [1.0]
    counts, prev = [], 0
    for c in cum:
        upto = round(n * c)
        counts.append(max(upto - prev, 0))
        prev = max(upto, prev)
    return counts, sum(counts) * sum(w * d.mean for w, d in parts)


class ServingSim:
    """One vLLM service on one node."""

    def __init__(self, scenario: str, *, node: str, boot_id: str, seed: int, start_ts: float,
                 pid: int, gpus: list[int], scrape_s: float = SCRAPE_S, faulty: bool = True) -> None:
        self.scenario, self.service = scenario, SERVICES[scenario]
        self.node, self.boot_id = node, boot_id
        self.rng = random.Random(f"{seed}/{node}/{self.service}")
        self.onset = start_ts + ONSET_S
        self.pid, self.gpus = pid, gpus
        self.faulty = faulty  # serving-replicas: the replica that fails
        self.scrape_s = scrape_s
        self.next_ts = start_ts + scrape_s
        self.last_ts = start_ts
        self.seq = 0
        self.down_until: float | None = None
        self.restarted = False

    def due(self, ts: float) -> bool:
        return ts >= self.next_ts

    def scrape(self, ts: float, seq: int) -> InferenceMetrics | None:
        """The record of the interval ending at ``ts`` (None while the server is down)."""
        self.next_ts = ts + self.scrape_s
        reset = False
        if self.scenario == "serving-deploy" and not self.restarted and ts >= self.onset:
            self.restarted, self.down_until = True, ts + 60.0
            self.pid += 1
        if self.down_until is not None:
            if ts < self.down_until:
                self.last_ts = ts
                return None  # the scrape failed: the agent publishes nothing
            self.down_until, reset = None, True
        start, self.last_ts = self.last_ts, ts
        return self._record(start, ts, seq, reset)

    def _load(self, ts: float) -> float:
        rate = BASE_RATE * (1 + 0.5 * math.sin(2 * math.pi * (ts % 86400) / 86400))
        if self.scenario == "serving-kv-knee" and ts >= self.onset:
            rate += 2 * BASE_RATE * min((ts - self.onset) / 600, 1.0)
        if self.scenario == "serving-batch-full" and ts >= self.onset:
            rate += BASE_RATE * min((ts - self.onset) / 600, 1.0)
        return rate

    def _record(self, start: float, ts: float, seq: int, reset: bool) -> InferenceMetrics:
        dt, after = ts - start, ts >= self.onset
        rate = self._load(ts)
        n = rate * dt
        kv = min(KV_PER_RATE * min(rate, MAX_BATCH[self.service] / E2E_MEDIAN_S), 0.99)
        waiting = preempt = 0.0
        ttft = [(1.0, LogNormal(0.2, 0.4))]
        if kv >= 0.9:  # the knee: the cache is full, requests queue, running ones are preempted
            over = rate / (0.9 / KV_PER_RATE)
            waiting, preempt = round(20 * (over - 1) + self.rng.random() * 3, 1), round(dt * 0.4 * over)
            ttft = [(1.0, LogNormal(0.2 + 0.3 * over, 0.5))]
        if self.scenario == "serving-tail" and after:
            ttft = [(0.97, LogNormal(0.14, 0.4)), (0.03, LogNormal(3.0, 0.2))]
        if self.scenario == "serving-deploy" and self.restarted:
            ttft = [(1.0, LogNormal(0.7, 0.4))]
        failed_share = 0.002
        if self.scenario == "serving-errors" and after and ts < self.onset + 1200:
            failed_share = 0.6
        if self.scenario == "serving-replicas" and after and self.faulty:
            failed_share = 0.6
        t_counts, t_sum = expected_counts(n, ttft, TTFT_BOUNDS)
        e_counts, e_sum = expected_counts(n, [(w, LogNormal(d.median + 4.0, 0.3)) for w, d in ttft], E2E_BOUNDS)
        tokens = n * TOKENS_OUT
        i_counts, i_sum = expected_counts(tokens, [(1.0, LogNormal(0.03, 0.3))], ITL_BOUNDS)
        failed = float(int(n * failed_share + self.rng.random()))
        labels = {"model_name": MODEL, "engine": "0"}

        def hist(name: str, metric: str, bounds: tuple[float, ...], counts: list[int], s: float) -> HistogramDelta:
            return HistogramDelta(name=name, metric=metric, labels=labels, bounds=list(bounds), counts=counts,
                                  count=sum(counts), sum=round(s, 6), reset=reset)

        def counter(name: str, metric: str, delta: float, **extra: str) -> CounterDelta:
            return CounterDelta(name=name, metric=metric, labels={**labels, **extra}, delta=delta, reset=reset)

        def gauge(name: str, metric: str, value: float) -> GaugeValue:
            return GaugeValue(name=name, metric=metric, labels=labels, value=value)

        cap = MAX_BATCH[self.service]
        running = min(rate * E2E_MEDIAN_S, cap)
        if rate * E2E_MEDIAN_S > cap:  # the batch is full: the rest waits
            waiting = max(waiting, round((rate * E2E_MEDIAN_S - cap) / 2, 1))
        return InferenceMetrics(
            ts=ts, start_ts=start, node=self.node, seq=seq, boot_id=self.boot_id, engine="vllm",
            service=self.service, model=MODEL, url="http://127.0.0.1:8000/metrics", pid=self.pid,
            gpu_indices=self.gpus,
            histograms=[hist("ttft", "vllm:time_to_first_token_seconds", TTFT_BOUNDS, t_counts, t_sum),
                        hist("itl", "vllm:inter_token_latency_seconds", ITL_BOUNDS, i_counts, i_sum),
                        hist("e2e", "vllm:e2e_request_latency_seconds", E2E_BOUNDS, e_counts, e_sum)],
            counters=[counter("requests", "vllm:request_success", float(round(n)) - failed, finished_reason="stop"),
                      counter("requests_failed", "vllm:request_success", failed, finished_reason="abort"),
                      counter("prompt_tokens", "vllm:prompt_tokens", float(round(n * 600))),
                      counter("generation_tokens", "vllm:generation_tokens", float(round(tokens))),
                      counter("preemptions", "vllm:num_preemptions", preempt)],
            gauges=[gauge("requests_running", "vllm:num_requests_running", round(running, 1)),
                    gauge("requests_waiting", "vllm:num_requests_waiting", waiting),
                    gauge("kv_cache_usage", "vllm:kv_cache_usage_perc", round(kv, 4))])
