"""The live view's scheduler panel: queues, pending reasons, allocated versus used.

Drawn from the engine's read-only state only: the scheduler stage's figures of each cluster's
last poll and stage 1's judgement of each job on each node (``streams/allocations.py``), so the
panel shows what the rules see. ``None`` when no scheduler has been heard from.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from gpuwarden.alert_text import humanize
from gpuwarden.streams.engine import Engine


def scheduler_panel(engine: Engine) -> Group | None:
    clusters = engine.scheduler.clusters()
    if not clusters:
        return None
    queues = Table(title="Scheduler queues", expand=True)
    for col in ("cluster", "partition", "pending", "running", "wait p50", "wait p90", "wait max"):
        queues.add_column(col)
    notes: list[str] = []
    for c in clusters:
        f = engine.scheduler.figures(c)
        if f is None:
            continue
        for q, fig in sorted(f.queues.items()):
            queues.add_row(c, q, str(fig.pending), str(fig.running), *(humanize(s) if fig.pending else "-" for s in
                                                                       (fig.wait_p50_s, fig.wait_p90_s,
                                                                        fig.wait_max_s)))
        rate = f.allocation_rate
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(f.reasons.items(), key=lambda kv: -kv[1])) or "none"
        notes.append(f"{c}: {f.gpus_allocated}/{f.gpus_total} GPUs allocated"
                     f"{'' if rate is None else f' ({rate:.0%})'}; pending: {reasons}"
                     + "".join(f"; job {j} fragmented ({n})" for j, n in sorted(f.fragmented.items())))
    used = Table(title="Allocated vs used", expand=True)
    for col in ("node", "job", "user", "allocated", "busy", "idle GPUs"):
        used.add_column(col)
    for name in engine.nodes.nodes():
        st = engine.nodes.state(name)
        if st is None:
            continue
        for jid, a in sorted(st.allocs.jobs.items()):
            if a.busy or a.idle:  # judged at least once
                used.add_row(name, jid, a.labels.get("user", ""), str(len(a.gpus) or a.count), str(len(a.busy)),
                             ",".join(map(str, a.idle)) or "-")
    return Group(queues, *notes, used)
