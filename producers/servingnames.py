"""What each serving engine calls the metrics the inference layer reads, in one table.

Names are Prometheus *family* names as ``prometheus_client``'s parser gives them (a
counter's family drops ``_total``). Sources (docs/inference.md): vLLM v0.10.2,
``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``); SGLang,
``python/sglang/srt/metrics/collector.py`` (``TokenizerMetricsCollector``,
``SchedulerMetricsCollector``). TGI and Triton are not mapped yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineNames:
    """One engine's metric families, each mapped to our name (the record's ``name``)."""

    model_label: str
    histograms: dict[str, str]
    counters: dict[str, str]
    gauges: dict[str, str]
    #: Label values that make a ``requests`` series one of failed requests: it is then published
    #: as ``requests_failed`` (an error-rate SLO's bad events; its total is both names together).
    error_outcomes: dict[str, frozenset[str]] = field(default_factory=dict)


VLLM = EngineNames(
    model_label="model_name",
    histograms={
        "vllm:time_to_first_token_seconds": "ttft",
        "vllm:inter_token_latency_seconds": "itl",
        "vllm:e2e_request_latency_seconds": "e2e",
        "vllm:request_queue_time_seconds": "queue",
    },
    counters={
        "vllm:prompt_tokens": "prompt_tokens",
        "vllm:generation_tokens": "generation_tokens",
        "vllm:num_preemptions": "preemptions",
        "vllm:request_success": "requests",
    },
    gauges={
        "vllm:num_requests_running": "requests_running",
        "vllm:num_requests_waiting": "requests_waiting",
        "vllm:kv_cache_usage_perc": "kv_cache_usage",
    },
    # vLLM 0.10.2 counts every finished request in request_success by finished_reason
    # (stop, length, abort) and has no per-model error counter: an abort is the failure it shows.
    error_outcomes={"finished_reason": frozenset({"abort"})},
)

SGLANG = EngineNames(
    model_label="model_name",
    histograms={
        "sglang:time_to_first_token_seconds": "ttft",
        "sglang:inter_token_latency_seconds": "itl",
        "sglang:e2e_request_latency_seconds": "e2e",
    },
    counters={
        "sglang:prompt_tokens": "prompt_tokens",
        "sglang:generation_tokens": "generation_tokens",
    },
    gauges={
        "sglang:num_running_reqs": "requests_running",
        "sglang:num_queue_reqs": "requests_waiting",
        "sglang:token_usage": "kv_cache_usage",
    },
)

ENGINES: dict[str, EngineNames] = {"vllm": VLLM, "sglang": SGLANG}
