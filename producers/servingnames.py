"""What each serving engine calls the metrics the inference layer reads, in one table.

Names are Prometheus *family* names as ``prometheus_client``'s parser gives them (a
counter's family drops ``_total``). Sources (docs/inference.md), each read at a release: vLLM
v0.11.0, ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``), with v0.10.1.1's and v0.10.2's
for the ITL histogram's older name; SGLang v0.5.2 (its PyPI wheel),
``sglang/srt/metrics/collector.py`` (``TokenizerMetricsCollector``,
``SchedulerMetricsCollector``) and ``sglang/srt/managers/tokenizer_manager.py`` (when each
counter counts); Hugging Face TGI, ``docs/source/reference/metrics.md`` (v3)
and ``router/src/infer/mod.rs`` (``tgi_request_failure`` by ``err``); Triton,
``docs/user_guide/metrics.md`` of triton-inference-server/server and, for the first-response
histogram, ``src/metric_model_reporter.cc`` of triton-inference-server/core (r24+).
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
    #: Histograms of a per-request count whose ``_sum`` is the counter we want (TGI has no token
    #: counters: generated tokens are ``tgi_request_generated_tokens``' sum).
    histogram_sums: dict[str, str] = field(default_factory=dict)
    #: Seconds per unit of a histogram not in seconds (Triton's is in milliseconds).
    histogram_units: dict[str, float] = field(default_factory=dict)
    #: An older family name -> the family that replaced it: the older one is read only from a
    #: server that does not write the newer (a release in between writes both, the same
    #: observations twice).
    superseded: dict[str, str] = field(default_factory=dict)

    def families(self) -> set[str]:
        return {*self.histograms, *self.counters, *self.gauges, *self.histogram_sums}


VLLM = EngineNames(
    model_label="model_name",
    histograms={
        "vllm:time_to_first_token_seconds": "ttft",
        "vllm:inter_token_latency_seconds": "itl",
        "vllm:time_per_output_token_seconds": "itl",
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
    # vLLM counts every finished request in request_success by finished_reason (stop, length,
    # abort) and has no per-model error counter: an abort is the failure it shows.
    error_outcomes={"finished_reason": frozenset({"abort"})},
    # The ITL histogram was vllm:time_per_output_token_seconds up to v0.10.1.1; v0.10.2 and
    # v0.11 write both (the same observations; the old one "deprecated in 0.11"), v0.12 hides
    # the old one and v0.13 removes it.
    superseded={"vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds"},
)

SGLANG = EngineNames(
    model_label="model_name",
    histograms={
        "sglang:time_to_first_token_seconds": "ttft",
        "sglang:inter_token_latency_seconds": "itl",
        "sglang:e2e_request_latency_seconds": "e2e",
    },
    # SGLang v0.5.2's tokenizer manager counts a request in num_requests_total when it finishes
    # (its tokens in prompt_tokens_total and generation_tokens_total at the same moment), and an
    # abort in num_aborted_requests when it sends it to the scheduler (``abort_request``). A
    # request aborted while it ran also finishes, with reason abort, so it is in both: the error
    # rate, aborts over both counters, is then understated by those; one aborted before it ran
    # is counted once. The abort counter is ``sglang:num_aborted_requests`` in v0.5.2 and
    # ``..._total`` later: the same family.
    counters={
        "sglang:prompt_tokens": "prompt_tokens",
        "sglang:generation_tokens": "generation_tokens",
        "sglang:num_requests": "requests",
        "sglang:num_aborted_requests": "requests_failed",
    },
    gauges={
        "sglang:num_running_reqs": "requests_running",
        "sglang:num_queue_reqs": "requests_waiting",
        "sglang:token_usage": "kv_cache_usage",
    },
)

# TGI (one model per server: its metrics carry no model label). No time-to-first-token
# histogram: ``tgi_request_mean_time_per_token_duration`` is not one (inference time over
# generated tokens, prefill included), nor inter-token latency, so neither is mapped and a
# ttft or itl objective cannot be judged for a TGI service (docs/inference.md).
TGI = EngineNames(
    model_label="",
    histograms={
        "tgi_request_duration": "e2e",
        "tgi_request_queue_duration": "queue",
    },
    counters={
        "tgi_request_success": "requests",
        "tgi_request_failure": "requests_failed",
    },
    gauges={
        "tgi_batch_current_size": "requests_running",
        "tgi_queue_size": "requests_waiting",
    },
    histogram_sums={
        "tgi_request_input_length": "prompt_tokens",
        "tgi_request_generated_tokens": "generation_tokens",
    },
)

# Triton: counters per model and version. Its only latency histogram is the time to the first
# *response*, in ms, for decoupled (streaming) models and only with ``--metrics-config
# histogram_latencies=true``: for a streaming LLM backend that is the first chunk, close to
# TTFT; the request and queue durations are cumulative microsecond counters (means only).
TRITON = EngineNames(
    model_label="model",
    histograms={"nv_inference_first_response_histogram_ms": "ttft"},
    counters={
        "nv_inference_request_success": "requests",
        "nv_inference_request_failure": "requests_failed",
    },
    gauges={"nv_inference_pending_request_count": "requests_waiting"},
    histogram_units={"nv_inference_first_response_histogram_ms": 0.001},
)

ENGINES: dict[str, EngineNames] = {"vllm": VLLM, "sglang": SGLANG, "tgi": TGI, "triton": TRITON}
