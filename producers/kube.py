"""Kubernetes pods that request ``nvidia.com/gpu``, and the nodes' GPUs, as contract records.

Read through the official ``kubernetes`` client (``pip install 'gpuwarden[kubernetes]'``;
kubeconfig or in-cluster config), listing pods of all namespaces page by page. A pod is the
job unit: Kubernetes has no queue of its own, so ``queue`` is the Kueue or Volcano queue when
the pod names one, ``account`` its namespace, ``user`` its ``user`` label if it has one. GPU
indices are not in the API (the device plugin picks them): the node agent's process attribution
(pod name and namespace) joins a pod with its GPUs. The mapping is pure over the client's models;
:class:`KubeApi` does the calls (in a thread: the client is synchronous).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuwarden.contract import JobState, NodeCapacity, SchedulerJob

GPU = "nvidia.com/gpu"
#: GPU feature discovery's node label with the GPU model (e.g. ``NVIDIA-H100-80GB-HBM3``).
GPU_PRODUCT = "nvidia.com/gpu.product"
QUEUE_LABELS = ("kueue.x-k8s.io/queue-name", "volcano.sh/queue-name", "scheduling.volcano.sh/queue-name")
PHASES = {"Pending": JobState.PENDING, "Running": JobState.RUNNING, "Succeeded": JobState.COMPLETED,
          "Failed": JobState.FAILED}
ENDED = (JobState.COMPLETED, JobState.FAILED, JobState.OUT_OF_MEMORY, JobState.PREEMPTED)


def _ts(t: datetime | None) -> float | None:
    return None if t is None else t.timestamp()


def _gpus(pod: Any) -> int:
    """GPUs the pod's containers ask for (extended resources: requests equal limits)."""
    n = 0
    for c in pod.spec.containers or []:
        r = c.resources
        asked = (r.limits or {}).get(GPU) or (r.requests or {}).get(GPU) if r is not None else None
        n += int(asked or 0)
    return n


def _terminated(pod: Any) -> list[Any]:
    return [s.state.terminated for s in (pod.status.container_statuses or [])
            if s.state is not None and s.state.terminated is not None]


def _state_and_reason(pod: Any) -> tuple[JobState, str]:
    status = pod.status
    state = PHASES.get(status.phase or "", JobState.UNKNOWN)
    if state is JobState.PENDING:
        for cond in status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return state, cond.reason or "Unschedulable"
        for s in status.container_statuses or []:
            if s.state is not None and s.state.waiting is not None:
                return state, s.state.waiting.reason or ""
        return state, ""
    if state is JobState.FAILED:
        reasons = [t.reason for t in _terminated(pod) if t.reason]
        if "OOMKilled" in reasons:
            return JobState.OUT_OF_MEMORY, "OOMKilled"
        if status.reason in ("Evicted", "Preempting", "DeletionByTaintManager"):
            return JobState.PREEMPTED, status.reason
        return state, status.reason or (reasons[0] if reasons else "")
    return state, ""


def jobs(pods: Iterable[Any], cluster: str, ts: float, gpu_types: dict[str, str]) -> list[SchedulerJob]:
    """One SchedulerJob per pod that asks for GPUs (``gpu_types``: node → GPU model)."""
    out = []
    for pod in pods:
        gpus = _gpus(pod)
        if not gpus:
            continue
        meta, spec, status = pod.metadata, pod.spec, pod.status
        labels = meta.labels or {}
        state, reason = _state_and_reason(pod)
        ended = _terminated(pod) if state in ENDED else []
        node = spec.node_name or ""
        out.append(SchedulerJob(
            ts=ts, cluster=cluster, scheduler="kubernetes", job_id=f"{meta.namespace}/{meta.name}",
            name=labels.get("job-name") or meta.name, user=labels.get("user", ""), account=meta.namespace or "",
            queue=next((labels[k] for k in QUEUE_LABELS if k in labels), ""), state=state, reason=reason,
            submit_time=_ts(meta.creation_timestamp), start_time=_ts(status.start_time) if node else None,
            end_time=max((_ts(t.finished_at) or 0.0 for t in ended), default=None) or None,
            gpus=gpus, gpu_type=gpu_types.get(node, ""), nodes=[node] if node else [],
            restarts=sum(s.restart_count or 0 for s in status.container_statuses or []),
            exit_code=ended[0].exit_code if ended else None,
        ))
    return out


def nodes(items: Iterable[Any], pods: list[Any], cluster: str, ts: float) -> list[NodeCapacity]:
    """One NodeCapacity per node with GPUs; allocated: the GPUs of the pods bound to it that
    have not ended."""
    used: dict[str, int] = {}
    for pod in pods:
        if pod.spec.node_name and (pod.status.phase or "") not in ("Succeeded", "Failed"):
            used[pod.spec.node_name] = used.get(pod.spec.node_name, 0) + _gpus(pod)
    out = []
    for n in items:
        total = int((n.status.allocatable or {}).get(GPU) or 0)
        if not total:
            continue
        ready = any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        state = ("ready" if ready else "notready") + ("+cordoned" if n.spec.unschedulable else "")
        name = n.metadata.name
        out.append(NodeCapacity(ts=ts, cluster=cluster, scheduler="kubernetes", node=name, state=state,
                                gpu_type=(n.metadata.labels or {}).get(GPU_PRODUCT, ""),
                                gpus_total=total, gpus_allocated=used.get(name, 0)))
    return out


@dataclass
class KubeApi:
    """Lists pods and nodes through the official client; ``kubeconfig`` None: in-cluster
    config when running in a pod, else the default kubeconfig."""

    kubeconfig: str | None = None
    page: int = 500
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        from kubernetes import client, config  # the optional extra, imported only when used

        if self.kubeconfig is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
        else:
            config.load_kube_config(config_file=self.kubeconfig)
        self.core = client.CoreV1Api()

    def _list(self, call: Any) -> list[Any]:
        items, token = [], None
        while True:
            kw = {"limit": self.page, "_request_timeout": self.timeout_s, **({"_continue": token} if token else {})}
            page = call(**kw)
            items.extend(page.items)
            meta = self.core.api_client.sanitize_for_serialization(page.metadata) or {}
            token = meta.get("continue")  # the list's wire field (the model names it _continue)
            if not token:
                return items

    def _poll(self, cluster: str, ts: float) -> tuple[list[SchedulerJob], list[NodeCapacity]]:
        pods = self._list(self.core.list_pod_for_all_namespaces)
        items = self._list(self.core.list_node)
        types = {n.metadata.name: (n.metadata.labels or {}).get(GPU_PRODUCT, "") for n in items}
        return jobs(pods, cluster, ts, types), nodes(items, pods, cluster, ts)

    async def poll(self, cluster: str, ts: float) -> tuple[list[SchedulerJob], list[NodeCapacity]]:
        return await asyncio.to_thread(self._poll, cluster, ts)
