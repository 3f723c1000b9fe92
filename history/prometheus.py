"""Task summaries from a Prometheus that already scrapes GPU metrics, to bootstrap class baselines.

A new site would wait ``engine.observation_period`` (14 days) before any class has a baseline;
most already have weeks of dcgm-exporter (or gpuwarden agent) series in Prometheus. This module
reads them over Prometheus' HTTP API (``/api/v1/query_range``) and rebuilds what stage 1 would have
sent stage 2: one :class:`gpuwarden.contract.TaskSummary` per task, node and summary interval.

Series: ``DCGM_FI_DEV_GPU_UTIL``, ``DCGM_FI_DEV_POWER_USAGE``, ``DCGM_FI_DEV_GPU_TEMP``,
``DCGM_FI_DEV_FB_USED`` and ``DCGM_FI_DEV_FB_TOTAL`` (or ``_FREE``), keyed by ``Hostname`` and
``gpu`` (dcgm-exporter's labels, which the agent's /metrics keeps). Which task holds a GPU: with
``class_label="task"`` the agent's ``gpuwarden_process_gpu_memory_bytes{task=...}`` (task id from its
``hpc_job``, else ``pod``, else class@node); any other label is read from the GPU series
themselves (dcgm-exporter on Kubernetes: ``container``, ``pod``, ``namespace``).

Estimator: the engine averages bucket means; here each step (``--step``, default the engine's
bucket) gives one instant value per GPU, so a summary's ``util_gpu`` is the mean over its steps of
the mean over the task's GPUs, ``power_w`` and ``temp_per_w`` means over steps and GPUs, and
``mem_peak_frac`` the largest used/total: close to the engine's when the step is its bucket.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

from gpuwarden.contract import TaskSummary

SERIES = {"util": "DCGM_FI_DEV_GPU_UTIL", "power": "DCGM_FI_DEV_POWER_USAGE", "temp": "DCGM_FI_DEV_GPU_TEMP",
          "used": "DCGM_FI_DEV_FB_USED", "total": "DCGM_FI_DEV_FB_TOTAL", "free": "DCGM_FI_DEV_FB_FREE"}
HOLDERS = "gpuwarden_process_gpu_memory_bytes"
#: Prometheus answers at most 11,000 points per series and query: longer ranges go in chunks.
MAX_POINTS = 10_000


class PrometheusError(Exception):
    """Prometheus did not answer, or answered with an error: says which query and why."""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    values: dict[float, float]  # ts -> value


class PromClient:
    """Range queries over Prometheus' HTTP API (wall-clock timeouts: it is the outside world)."""

    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.client = httpx.Client(timeout=timeout_s)

    def close(self) -> None:
        self.client.close()

    def range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        out: dict[tuple, Series] = {}
        span = MAX_POINTS * step
        t = start
        while t <= end:
            for s in self._range(query, t, min(end, t + span), step):
                key = tuple(sorted(s.labels.items()))
                if key in out:
                    out[key].values.update(s.values)
                else:
                    out[key] = s
            t += span + step
        return list(out.values())

    def _range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        try:
            r = self.client.get(f"{self.url}/api/v1/query_range",
                                params={"query": query, "start": start, "end": end, "step": step})
            doc = r.json()
        except (httpx.HTTPError, ValueError) as e:
            raise PrometheusError(f"{self.url}: {query}: {type(e).__name__}: {e}") from None
        if doc.get("status") != "success":
            raise PrometheusError(f"{self.url}: {query}: {doc.get('errorType', r.status_code)}: {doc.get('error', '')}")
        return [Series(s["metric"], {float(ts): float(v) for ts, v in s["values"] if v not in ("NaN", "+Inf", "-Inf")})
                for s in doc["data"]["result"]]


@dataclass
class _Acc:
    gpus: set[str] = field(default_factory=set)
    util: list[float] = field(default_factory=list)  # per step: the mean over the task's GPUs
    power: list[float] = field(default_factory=list)
    temp_per_w: list[float] = field(default_factory=list)
    mem_peak: float = 0.0
    steps: int = 0


def _by_gpu(series: Iterable[Series]) -> dict[tuple[str, str], Series]:
    """One series per GPU: those of one GPU with other labels (a pod that came and went) merged."""
    out: dict[tuple[str, str], Series] = {}
    for s in series:
        key = (s.labels.get("Hostname", ""), s.labels.get("gpu", ""))
        if key in out:
            out[key].values.update(s.values)
        else:
            out[key] = Series(s.labels, dict(s.values))
    return out


def summaries(client: PromClient, *, since: float, until: float, step: float, interval: float,
              class_label: str = "task") -> list[TaskSummary]:
    """The task summaries the range holds, in time order."""
    raw = {k: client.range(q, since, until, step) for k, q in SERIES.items() if k != "free"}
    if not raw["total"]:  # exporters that give free memory instead of the total
        raw["free"] = client.range(SERIES["free"], since, until, step)
    got = {k: _by_gpu(v) for k, v in raw.items()}
    got.setdefault("free", {})
    holders: dict[tuple[str, str, float], tuple[str, str]] = {}  # (host, gpu, ts) -> (class, task id)
    if class_label == "task":
        for s in client.range(f"max by (Hostname, gpu, task, hpc_job, pod) ({HOLDERS})", since, until, step):
            cls = s.labels.get("task") or ""
            if not cls:
                continue
            host = s.labels.get("Hostname", "")
            tid = s.labels.get("hpc_job") or s.labels.get("pod") or f"{cls}@{host}"
            for ts in s.values:
                holders[host, s.labels.get("gpu", ""), ts] = (cls, tid)
    else:
        for s in raw["util"]:  # each series, before merging: its labels say who held the GPU then
            host, gpu, cls = s.labels.get("Hostname", ""), s.labels.get("gpu", ""), s.labels.get(class_label) or ""
            if cls:
                tid = s.labels.get("pod") or s.labels.get("hpc_job") or f"{cls}@{host}"
                for ts in s.values:
                    holders[host, gpu, ts] = (cls, tid)
    windows: dict[tuple[float, str, str, str], _Acc] = defaultdict(_Acc)  # (end, host, class, task id)
    per_step: dict[tuple[float, str, str, str, float], list[tuple[str, str]]] = defaultdict(list)
    for (host, gpu, ts), (cls, tid) in holders.items():
        end = (math.floor(ts / interval) + 1) * interval
        per_step[end, host, cls, tid, ts].append((host, gpu))
    for (end, host, cls, tid, ts), gpus in sorted(per_step.items()):
        acc = windows[end, host, cls, tid]
        utils = [v for g in gpus if (v := _at(got["util"], g, ts)) is not None]
        if not utils:
            continue
        acc.steps += 1
        acc.gpus.update(g for _, g in gpus)
        acc.util.append(sum(utils) / len(utils))
        for g in gpus:
            power, temp = _at(got["power"], g, ts), _at(got["temp"], g, ts)
            if power:
                acc.power.append(power)
                if temp is not None:
                    acc.temp_per_w.append(temp / power)
            used = _at(got["used"], g, ts)
            total = _at(got["total"], g, ts)
            if total is None and used is not None and (free := _at(got["free"], g, ts)) is not None:
                total = used + free
            if used is not None and total:
                acc.mem_peak = max(acc.mem_peak, used / total)
    out = []
    for (end, host, cls, tid), acc in sorted(windows.items()):
        if not acc.steps or end > until:  # a window the range does not cover whole: stage 1 would not have sent it
            continue
        stats = {"util_gpu": round(sum(acc.util) / len(acc.util), 6)}
        if acc.power:
            stats["power_w"] = round(sum(acc.power) / len(acc.power), 6)
        if acc.temp_per_w:
            stats["temp_per_w"] = round(sum(acc.temp_per_w) / len(acc.temp_per_w), 6)
        if acc.mem_peak:
            stats["mem_peak_frac"] = round(acc.mem_peak, 6)
        out.append(TaskSummary(ts=end, task=cls, task_id=tid, node=host, window_s=interval, samples=acc.steps,
                               gpus=len(acc.gpus), stats=stats))
    return out


def _at(series: dict[tuple[str, str], Series], gpu: tuple[str, str], ts: float) -> float | None:
    s = series.get(gpu)
    return None if s is None else s.values.get(ts)
