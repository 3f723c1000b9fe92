"""A NodeSnapshot reduced, as it arrives, to what stage 1 reads (``Snap``)."""

from __future__ import annotations

from typing import NamedTuple

from gpuwarden.contract import NodeSnapshot
from gpuwarden.streams.columns import GPU_COLUMNS, gpu_rows
from gpuwarden.streams.statecodec import state
from gpuwarden.streams.windows import pack_floats, unpack_floats


class Owner(NamedTuple):
    """Who holds a GPU in a snapshot: the process's task (None or ``""``: a process of no task)
    and its user, task class and project, as the agent reported them."""

    task_id: str | None
    user: str | None
    task_class: str | None
    project: str | None


@state
class Snap:
    """Per GPU its index, uuid and window row (``gpuwarden.streams.columns.GPU_COLUMNS``), and
    per GPU the process that holds it (its ``Owner``), and
    the scheduler job its processes carry (``slurm_job_id``, else ``namespace/pod``: the
    Kubernetes collector's job id).

    The reorder buffer holds the allowed lateness of them (~30 per node at 1 s ticks): a
    decoded snapshot of 8 GPUs is ~18 kB of Python objects, this is ~4 kB, and a checkpoint
    writes it without re-encoding the record (it was ~80 % of a node's state bytes). The
    decoded record is freed at once."""

    __slots__ = ("ts", "node", "boot_id", "seq", "versions", "gpus", "owners", "jobs")

    def __init__(self, snap: NodeSnapshot) -> None:
        self.ts, self.node, self.boot_id, self.seq = snap.ts, snap.node, snap.boot_id, snap.seq
        self.versions = (snap.driver_version or "", snap.cuda_version or "")  # (driver, CUDA)
        owners: dict[int, Owner] = {}
        p = snap.processes
        for gpu, task_id, user, task, project in zip(p.gpu_index, p.task_id, p.user, p.task, p.project):
            if gpu not in owners or (task_id and not owners[gpu].task_id):  # a task's process first
                owners[gpu] = Owner(task_id, user, task, project)
        self.owners = owners
        self.jobs = {gpu: job or (f"{ns}/{pod}" if ns else pod)
                     for gpu, job, pod, ns in zip(p.gpu_index, p.slurm_job_id, p.pod_name, p.pod_namespace)
                     if job or pod}
        g = snap.gpus
        self.gpus = tuple(zip(g.index, g.uuid, gpu_rows(g, owners)))

    # Compact state: the rows as one packed float column (a checkpoint writes ~30 per node).
    def __getstate__(self) -> dict:
        return {"ts": self.ts, "node": self.node, "boot_id": self.boot_id, "seq": self.seq,
                "versions": list(self.versions), "owners": [[i, *o] for i, o in self.owners.items()],
                "jobs": [[i, j] for i, j in self.jobs.items()],
                "gpus": [[i, u] for i, u, _ in self.gpus],
                "rows": pack_floats([v for _, _, row in self.gpus for v in row])}

    def __setstate__(self, s: dict) -> None:
        self.ts, self.node, self.boot_id, self.seq = s["ts"], s["node"], s["boot_id"], s["seq"]
        self.versions = tuple(s["versions"])
        self.owners = {o[0]: Owner(*o[1:]) for o in s["owners"]}
        self.jobs = {i: j for i, j in s["jobs"]}
        values, n = unpack_floats(s["rows"]), len(GPU_COLUMNS)
        self.gpus = tuple((i, u, tuple(values[k * n:(k + 1) * n])) for k, (i, u) in enumerate(s["gpus"]))
