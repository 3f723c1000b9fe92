"""The live view's scheduler panes: queues with pending reasons, and allocated versus used.

Drawn from the engine's read-only state only: the scheduler stage's figures of each cluster's
last poll and stage 1's judgement of each job on each node (``streams/allocations.py``), so the
panes show what the rules see. No rows (the panes are left out) while no scheduler has been
heard from. Rows are cell tuples under the declared columns (``app/live_view.py``'s ``Pane``).
"""

from __future__ import annotations

from gpuwarden.humantime import span
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.schedstage import ClusterFigures

#: The waits are those of the jobs pending at the last poll, so far (``/scheduler`` and ``report
#: scheduler`` give the waits of jobs that started: submission to first start).
QUEUE_COLUMNS = ("cluster", "partition", "pending", "running", "pending jobs' wait p50", "p90", "max")
ALLOCATION_COLUMNS = ("node", "job", "user", "allocated", "busy", "idle GPUs")


def _heard(engine: Engine) -> list[tuple[str, ClusterFigures]]:
    """Each cluster with the figures of its last poll (none before its first)."""
    return [(c, f) for c in engine.scheduler.clusters() if (f := engine.scheduler.figures(c)) is not None]


def queue_notes(engine: Engine) -> list[str]:
    """Per cluster one line: GPUs allocated, pending reasons, fragmented jobs (above its partitions)."""
    out = []
    for c, f in _heard(engine):
        rate = f.allocation_rate
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(f.reasons.items(), key=lambda kv: -kv[1])) or "none"
        out.append(f"{c}: {f.gpus_allocated}/{f.gpus_total} GPUs allocated"
                   f"{'' if rate is None else f' ({rate:.0%})'}; pending: {reasons}"
                   + "".join(f"; job {j} fragmented ({n})" for j, n in sorted(f.fragmented.items())))
    return out


def queue_rows(engine: Engine) -> list[tuple[str, ...]]:
    """Per cluster its partitions: jobs pending and running, and how long the pending ones have waited."""
    rows: list[tuple[str, ...]] = []
    for c, f in _heard(engine):
        queues = sorted(f.queues.items())
        if not queues:
            rows.append((c, "-", "0", "0", "-", "-", "-"))
        for q, fig in queues:
            waits = (span(s) if fig.pending and s is not None else "-"
                     for s in (fig.wait_p50_s, fig.wait_p90_s, fig.wait_max_s))
            rows.append((c, q, str(fig.pending), str(fig.running), *waits))
    return rows


def allocation_rows(engine: Engine) -> list[tuple[str, ...]]:
    """Each job stage 1 judged on each node: GPUs allocated, busy, and which idle."""
    rows: list[tuple[str, ...]] = []
    for name in engine.nodes.nodes():
        st = engine.nodes.state(name)
        if st is None:
            continue
        for jid, a in sorted(st.allocs.jobs.items()):
            if a.busy or a.idle:  # judged at least once
                rows.append((name, jid, a.labels.get("user", ""), str(len(a.gpus) or a.count), str(len(a.busy)),
                             ",".join(map(str, a.idle)) or "-"))
    return rows
