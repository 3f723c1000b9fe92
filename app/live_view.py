"""The live terminal view of ``gpuwarden run`` (rich): nodes, GPUs, tasks with baselines, open alerts."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from gpuwarden.app.scheduler_view import scheduler_panel
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.view import node_view

_TIER_STYLE = {"critical": "bold red", "attention": "yellow", "info": "cyan"}


def _fmt(v: float | None, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def render(engine: Engine, now: float, notice: str | None = None) -> Group:
    """One frame: built from the engine's read-only views, so it shows exactly what the rules see;
    ``notice`` (no receiver configured) above it."""
    gpus = Table(title="GPUs", expand=True)
    for col in ("node", "gpu", "util %", "mem GiB", "temp °C", "power W", "task", "user"):
        gpus.add_column(col)
    tasks = Table(title="Tasks", expand=True)
    for col in ("node", "task", "class", "GPUs", "class baseline util %"):
        tasks.add_column(col)
    for name in engine.nodes.nodes():
        st = engine.nodes.state(name)
        assert st is not None  # a node the stage lists has state
        view = node_view(st)
        for g in view.gpus:
            val = g.latest.get
            gpus.add_row(name, str(g.index), _fmt(val("util_gpu")), _fmt(val("mem_used_gib"), ".1f"),
                         _fmt(val("temp_gpu_c")), _fmt(val("power_w")), g.labels.get("task", ""),
                         g.labels.get("user", ""))
        for t in view.tasks:
            cls = t.labels.get("task_class", "")
            base = engine.classes.baseline(cls).get("util_gpu") if cls else None
            shown = "learning" if base is None else f"{base.median:.0f} ({base.low:.0f}-{base.high:.0f})"
            tasks.add_row(name, t.task_id, cls, str(t.gpus), shown)
    alerts = Table(title="Open alerts", expand=True)
    for col in ("tier", "rule", "where", "since (event time)", "summary"):
        alerts.add_column(col)
    for a in sorted(engine.open_alerts(), key=lambda a: (a.tier.value != "critical", a.started_at)):
        where = " ".join(f"{k}={a.labels[k]}" for k in ("node", "gpu", "task") if k in a.labels)
        alerts.add_row(f"[{_TIER_STYLE[a.tier.value]}]{a.tier.value}[/]", a.rule, where,
                       f"{now - a.started_at:.0f} s ago", a.summary[:120])
    sched = scheduler_panel(engine)  # queues, pending reasons, allocated vs used (#19)
    return Group(*([f"[bold yellow]{notice}[/]"] if notice else []), gpus, tasks, *([sched] if sched else []),
                 alerts)
