"""The inference scraper against a vLLM v0.10.2 endpoint rendered by the real prometheus_client
(tests/fakes/vllm.py): deltas, a restart, garbage, HTTP errors and a server that went away."""

from __future__ import annotations

import logging
import time

import pytest

from gpuwarden.contract import ContractError, GpuProcess, InferenceMetrics, Topics, decode, encode, record_key
from gpuwarden.producers.config import AgentConfig, InferenceConfig
from gpuwarden.producers.inference import InferenceScraper, parse
from gpuwarden.producers.servingnames import VLLM
from gpuwarden.streams.dlq import Inbound, Limits, decode_inbound
from tests.fakes.vllm import TTFT_BUCKETS, FakeVllm, Request

MODELS = [f"org/model-{i}" for i in range(10)]


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def vllm():
    server = FakeVllm(list(MODELS))
    yield server
    server.close()


def scraper_for(server: FakeVllm, clock: Clock, **extra) -> InferenceScraper:
    cfg = InferenceConfig(targets=[{"url": server.url, "engine": "vllm", "service": "chat", **extra}], timeout=1.0)
    return InferenceScraper(cfg, node="node-0", boot_id="boot-1", clock=clock)


def req(ttft: float, reason: str = "stop") -> Request:
    return Request(ttft=ttft, itl=[0.02, 0.03, 0.2], e2e=ttft + 1.0, queue=0.01, prompt_tokens=100,
                   finished_reason=reason)


def by_model(records: list[InferenceMetrics]) -> dict[str, InferenceMetrics]:
    return {r.model: r for r in records}


def hist(rec: InferenceMetrics, name: str):
    (h,) = [h for h in rec.histograms if h.name == name]
    return h


def counter(rec: InferenceMetrics, name: str) -> float:
    return sum(c.delta for c in rec.counters if c.name == name)


def test_first_scrape_is_the_baseline_then_deltas_per_model(vllm: FakeVllm) -> None:
    clock = Clock()
    for _ in range(5):  # history before the agent started: never published as one interval's events
        vllm.metrics.finish(MODELS[0], req(0.3))
    s = scraper_for(vllm, clock, gpus=[0, 1])
    assert s.scrape_all() == []
    vllm.metrics.finish(MODELS[0], req(0.3))
    vllm.metrics.finish(MODELS[0], req(1.7))
    vllm.metrics.finish(MODELS[3], req(0.05, reason="abort"))
    vllm.metrics.running.labels(MODELS[0], "0").set(7)
    vllm.metrics.kv.labels(MODELS[0], "0").set(0.42)
    clock.t += 15
    recs = by_model(s.scrape_all())
    assert sorted(recs) == sorted(MODELS)  # every model, idle ones with zero deltas and their gauges
    r0 = recs[MODELS[0]]
    assert (r0.start_ts, r0.ts) == (clock.t - 15, clock.t)
    assert (r0.service, r0.engine, r0.gpu_indices) == ("chat", "vllm", [0, 1])
    ttft = hist(r0, "ttft")
    assert ttft.metric == "vllm:time_to_first_token_seconds" and ttft.bounds == TTFT_BUCKETS
    assert ttft.labels == {"engine": "0"} and ttft.count == 2 and not ttft.reset
    assert ttft.counts[TTFT_BUCKETS.index(0.5)] == 1 and ttft.counts[TTFT_BUCKETS.index(2.5)] == 1
    assert ttft.sum == pytest.approx(2.0)
    assert hist(r0, "itl").count == 6
    assert counter(r0, "prompt_tokens") == 200 and counter(r0, "generation_tokens") == 8
    assert counter(r0, "requests") == 2 and counter(r0, "requests_failed") == 0
    gauges = {g.name: g.value for g in r0.gauges}
    assert gauges == {"requests_running": 7.0, "requests_waiting": 0.0, "kv_cache_usage": 0.42}
    r3 = recs[MODELS[3]]
    assert counter(r3, "requests_failed") == 1 and counter(r3, "requests") == 0
    assert [c.labels["finished_reason"] for c in r3.counters if c.name == "requests_failed"] == ["abort"]


def test_records_round_trip_through_the_contract_on_their_topic(vllm: FakeVllm) -> None:
    clock = Clock()
    s = scraper_for(vllm, clock)
    s.scrape_all()
    vllm.metrics.finish(MODELS[1], req(0.2))
    clock.t += 15
    rec = by_model(s.scrape_all())[MODELS[1]]
    assert Topics("lab1.").for_record(rec) == "lab1.inference.metrics" and record_key(rec) == "node-0"
    back = decode(encode(rec), now=clock.t)
    assert back == rec and back.schema_ == "inference_metrics/1"


def test_a_malformed_inference_record_is_a_contract_error_for_the_dlq() -> None:
    bad = (b'{"schema":"inference_metrics/1","ts":1700000000,"start_ts":1699999985,"node":"n","seq":0,'
           b'"boot_id":"b","engine":"vllm","service":"s","model":"m","url":"u",'
           b'"histograms":[{"name":"ttft","metric":"x","bounds":[1.0,2.5],"counts":[1,2],"count":3,"sum":1}]}')
    with pytest.raises(ContractError, match=r"histograms\[0\]: Value error, counts: 2 values for 2 bounds"):
        decode_inbound(Inbound("inference.metrics", 0, 7, b"n", bad), InferenceMetrics, Limits(),
                       now=1_700_000_000.0)


def test_a_restart_counts_from_zero_never_a_negative_or_a_burst(vllm: FakeVllm, caplog) -> None:
    clock = Clock()
    s = scraper_for(vllm, clock)
    for _ in range(50):
        vllm.metrics.finish(MODELS[0], req(0.3))
    s.scrape_all()
    for _ in range(20):
        vllm.metrics.finish(MODELS[0], req(0.3))
    clock.t += 15
    assert counter(by_model(s.scrape_all())[MODELS[0]], "requests") == 20
    vllm.restart()  # every total back to zero, new _created
    for _ in range(3):
        vllm.metrics.finish(MODELS[0], req(0.3))
    clock.t += 15
    with caplog.at_level(logging.WARNING):
        r0 = by_model(s.scrape_all())[MODELS[0]]
    assert counter(r0, "requests") == 3 and hist(r0, "ttft").count == 3
    assert hist(r0, "ttft").reset and all(c.reset for c in r0.counters)
    assert "counters reset (server restarted?)" in caplog.text
    assert s.counts[(vllm.url, "reset")] == 1
    clock.t += 15
    vllm.metrics.finish(MODELS[0], req(0.3))
    r0 = by_model(s.scrape_all())[MODELS[0]]
    assert counter(r0, "requests") == 1 and not hist(r0, "ttft").reset


def test_a_restart_that_outgrew_the_old_totals_is_still_seen_by_created(vllm: FakeVllm) -> None:
    clock = Clock()
    s = scraper_for(vllm, clock)
    vllm.metrics.finish(MODELS[0], req(0.3))
    s.scrape_all()
    vllm.restart()
    for _ in range(4):
        vllm.metrics.finish(MODELS[0], req(0.3))
    clock.t += 15
    r0 = by_model(s.scrape_all())[MODELS[0]]
    assert counter(r0, "requests") == 4 and hist(r0, "ttft").reset


@pytest.mark.parametrize("mode, reason", [("garbage", "unparsable"), ("http500", "http_status")])
def test_garbage_or_an_http_error_gives_a_log_line_a_count_and_no_record(vllm: FakeVllm, caplog, mode, reason) -> None:
    clock = Clock()
    s = scraper_for(vllm, clock)
    s.scrape_all()
    vllm.metrics.finish(MODELS[0], req(0.3))
    vllm.mode = mode
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            clock.t += 15
            assert s.scrape_all() == []
    assert s.counts[(vllm.url, reason)] == 3
    assert caplog.text.count(vllm.url) == 1  # once per change of trouble, not every interval
    assert "no record this interval, nothing alerted" in caplog.text
    vllm.mode = "ok"
    clock.t += 15
    r0 = by_model(s.scrape_all())[MODELS[0]]
    assert r0.start_ts == clock.t - 60 and counter(r0, "requests") == 1  # from the last good baseline


def test_a_server_that_went_away_is_unreachable_not_an_alert(caplog) -> None:
    server = FakeVllm(["m"])
    clock = Clock()
    s = scraper_for(server, clock)
    s.scrape_all()
    server.close()
    with caplog.at_level(logging.WARNING):
        clock.t += 15
        assert s.scrape_all() == []
    assert s.counts[(server.url, "unreachable")] == 1
    assert "did not answer" in caplog.text


def test_an_endpoint_with_none_of_the_engines_metrics_is_counted() -> None:
    assert len(parse("# TYPE up gauge\nup 1\n", VLLM)) == 0


def test_the_agent_config_takes_targets() -> None:
    cfg = AgentConfig.model_validate({"inference": {"targets": [
        {"url": "http://127.0.0.1:8000/metrics", "engine": "vllm", "service": "chat"}], "interval": "30s"}})
    assert cfg.inference.interval == 30.0 and cfg.inference.targets[0].engine == "vllm"
    with pytest.raises(ValueError, match="engine"):
        AgentConfig.model_validate({"inference": {"targets": [{"url": "http://x/metrics", "engine": "tensorrt",
                                                               "service": "s"}]}})


def fake_proc(root, *, port: int, server_pid: int, worker_pid: int) -> None:
    """A /proc tree: ``server_pid`` listens on ``port`` (inode 4242), ``worker_pid`` is its child;
    another process listens on a port nobody serves metrics on."""
    (root / "net").mkdir(parents=True)
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (root / "net" / "tcp").write_text(
        head + f"   0: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 4242 1\n"
        "   1: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0 0 99 1\n"
        "   2: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000  1000 0 77 1\n")
    for pid, ppid, sockets in ((server_pid, 1, [4242]), (worker_pid, server_pid, []), (900, 1, [99])):
        (root / str(pid) / "fd").mkdir(parents=True)
        (root / str(pid) / "stat").write_text(f"{pid} (python3) S {ppid} 1 1 0 -1\n")
        for n, inode in enumerate(sockets):
            (root / str(pid) / "fd" / str(n + 3)).symlink_to(f"socket:[{inode}]")


def holder(pid: int, gpu: int) -> GpuProcess:
    return GpuProcess(pid=pid, gpu_index=gpu, task="chat-llm")


def test_the_record_names_the_serving_process_and_the_gpus_its_children_hold(vllm: FakeVllm, tmp_path) -> None:
    port = int(vllm.url.split(":")[2].split("/")[0])
    fake_proc(tmp_path, port=port, server_pid=500, worker_pid=501)
    clock = Clock()
    cfg = InferenceConfig(targets=[{"url": vllm.url, "engine": "vllm", "service": "chat"}])
    s = InferenceScraper(cfg, node="n", boot_id="b", clock=clock, proc_root=tmp_path,
                         gpu_processes=lambda: [holder(501, 2), holder(501, 3), holder(900, 0)])
    s.scrape_all()
    clock.t += 15
    rec = s.scrape_all()[0]
    assert (rec.pid, rec.gpu_indices) == (500, [2, 3])


def test_discovery_finds_the_engine_in_a_gpu_holders_ancestry(vllm: FakeVllm, tmp_path, caplog) -> None:
    port = int(vllm.url.split(":")[2].split("/")[0])
    fake_proc(tmp_path, port=port, server_pid=500, worker_pid=501)
    clock = Clock()
    s = InferenceScraper(InferenceConfig(discover=True), node="n", boot_id="b", clock=clock, proc_root=tmp_path,
                         gpu_processes=lambda: [holder(501, 1)])
    with caplog.at_level(logging.INFO):
        assert s.scrape_all() == []  # found, baseline taken
    (state,) = s.states
    assert (state.target.url, state.target.engine, state.target.service) == (vllm.url, "vllm", "chat-llm")
    assert f"found vllm serving chat-llm on {vllm.url} (pid 500)" in caplog.text
    vllm.metrics.finish(MODELS[0], req(0.3))
    clock.t += 15
    rec = by_model(s.scrape_all())[MODELS[0]]
    assert (rec.service, rec.pid, rec.gpu_indices) == ("chat-llm", 500, [1])
    s.refresh()
    assert len(s.states) == 1  # probed once per process and port; port 22's owner is no GPU holder's ancestor


def test_the_thread_scrapes_on_its_own_and_the_tick_drains(vllm: FakeVllm) -> None:
    cfg = InferenceConfig(targets=[{"url": vllm.url, "engine": "vllm", "service": "chat"}], interval=0.05)
    s = InferenceScraper(cfg, node="n", boot_id="b")
    s.start()
    try:
        vllm.metrics.finish(MODELS[0], req(0.3))
        got: list[InferenceMetrics] = []
        deadline = time.monotonic() + 120  # a wait on the first scrape; the bound only catches a hang (#33)
        while not got and time.monotonic() < deadline:
            got = s.drain()
            time.sleep(0.05)
    finally:
        s.stop()
    assert got and {r.model for r in got} == set(MODELS)
