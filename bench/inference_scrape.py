"""Agent cost of one scrape of a vLLM endpoint serving 10 models, against the HTTP request itself.

The endpoint is tests/fakes/vllm.py in a child process: vLLM v0.10.2's metric objects
(real prometheus_client, its names, labels and buckets) for ``--models`` models with
traffic observed, rendered per request by ``generate_latest`` — so the server's rendering
is not charged to the agent. Per round, alternating: (a) a bare ``httpx`` GET of the
endpoint (what any scraper pays); (b) the agent's whole scrape: the same GET, then
``prometheus_client``'s parser, deltas against the previous scrape and one
``inference_metrics/1`` record per model, encoded for the wire. Wall time and this
process's CPU, medians of ``--rounds``.

Usage: .venv/bin/python bench/inference_scrape.py [--models 10] [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from gpuwarden.contract import encode  # noqa: E402
from gpuwarden.producers.config import InferenceConfig  # noqa: E402
from gpuwarden.producers.inference import InferenceScraper, parse  # noqa: E402
from gpuwarden.producers.servingnames import VLLM  # noqa: E402

SERVER = """
import sys, random, time
sys.path.insert(0, {root!r})
from tests.fakes.vllm import FakeVllm, Request
models = [f"org/model-{{i}}" for i in range({models})]
server = FakeVllm(models)
rng = random.Random(1)
for m in models:
    for _ in range(1000):
        t = rng.lognormvariate(-1, 0.8)
        server.metrics.finish(m, Request(ttft=t, itl=[rng.uniform(0.01, 0.1) for _ in range(20)], e2e=t + 2,
                                         queue=rng.uniform(0, 0.5), prompt_tokens=500))
print(server.url, flush=True)
time.sleep(3600)
"""


def timed(fn) -> tuple[float, float, object]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    child = subprocess.Popen([sys.executable, "-c", SERVER.format(root=str(ROOT), models=args.models)],
                             stdout=subprocess.PIPE, text=True)
    try:
        url = child.stdout.readline().strip()
        client = httpx.Client(timeout=5.0)
        scraper = InferenceScraper(InferenceConfig(targets=[{"url": url, "engine": "vllm", "service": "bench"}]),
                                   node="bench", boot_id="bench", client=client)
        scraper.scrape_all()  # the baseline
        get_wall, get_cpu, scrape_wall, scrape_cpu, parse_cpu = [], [], [], [], []
        for _ in range(args.rounds):
            w, c, resp = timed(lambda: client.get(url))
            get_wall.append(w)
            get_cpu.append(c)
            _, c, _ = timed(lambda: parse(resp.text, VLLM))
            parse_cpu.append(c)
            w, c, records = timed(lambda: [encode(r) for r in scraper.scrape_all()])
            scrape_wall.append(w)
            scrape_cpu.append(c)
        body = len(resp.content)
        med = statistics.median
        print(f"endpoint: {args.models} models, {body / 1024:.0f} KiB of metrics text, "
              f"{len(records)} records per scrape ({sum(map(len, records)) / 1024:.0f} KiB encoded)")
        print(f"(a) HTTP GET alone            wall {med(get_wall) * 1e3:7.2f} ms   CPU {med(get_cpu) * 1e3:7.2f} ms")
        print(f"(b) agent scrape (GET + parse + deltas + records)"
              f"  wall {med(scrape_wall) * 1e3:7.2f} ms   CPU {med(scrape_cpu) * 1e3:7.2f} ms")
        print(f"    of which prometheus_client's parser  CPU {med(parse_cpu) * 1e3:7.2f} ms")
        print(f"(b)/(a) CPU {med(scrape_cpu) / med(get_cpu):.1f}x; at one scrape per 15 s: "
              f"{med(scrape_cpu) / 15 * 100:.3f} % of a core")
        print(json.dumps({"models": args.models, "body_kib": round(body / 1024, 1),
                          "get_wall_ms": round(med(get_wall) * 1e3, 3), "get_cpu_ms": round(med(get_cpu) * 1e3, 3),
                          "scrape_wall_ms": round(med(scrape_wall) * 1e3, 3),
                          "scrape_cpu_ms": round(med(scrape_cpu) * 1e3, 3),
                          "parse_cpu_ms": round(med(parse_cpu) * 1e3, 3)}))
    finally:
        child.kill()
        child.wait()


if __name__ == "__main__":
    main()
