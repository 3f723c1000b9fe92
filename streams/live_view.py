"""The live terminal view of ``gpuwarden run`` (rich): nodes, GPUs, tasks with baselines, open alerts."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

from gpuwarden.streams.engine import Engine
from gpuwarden.streams.columns import GPU_INDEX

_TIER_STYLE = {"critical": "bold red", "attention": "yellow", "info": "cyan"}


def _fmt(v: float | None, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def render(engine: Engine, now: float) -> Group:
    """One frame: built from engine state only, so it shows exactly what the rules see."""
    gpus = Table(title="GPUs", expand=True)
    for col in ("node", "gpu", "util %", "mem GiB", "temp °C", "power W", "task", "user"):
        gpus.add_column(col)
    tasks = Table(title="Tasks", expand=True)
    for col in ("node", "task", "class", "GPUs", "class baseline util %"):
        tasks.add_column(col)
    stage = engine.nodes
    for name in stage.nodes():
        st = stage._nodes[name]
        for idx in sorted(st.gpus):
            g = st.gpus[idx]
            latest = g.win.latest_row()

            def val(metric: str, row: Any = latest) -> float | None:
                return None if row is None else row[GPU_INDEX[metric]]
            gpus.add_row(name, str(idx), _fmt(val("util_gpu")), _fmt(val("mem_used_gib"), ".1f"),
                         _fmt(val("temp_gpu_c")), _fmt(val("power_w")), g.labels.get("task", ""),
                         g.labels.get("user", ""))
        for tid in sorted(st.tasks):
            t = st.tasks[tid]
            cls = t.labels.get("task_class", "")
            base = engine.classes.baseline(cls).get("util_gpu") if cls else None
            shown = "learning" if base is None else f"{base.median:.0f} ({base.low:.0f}-{base.high:.0f})"
            tasks.add_row(name, tid, cls, str(len(t.gpus)), shown)
    alerts = Table(title="Open alerts", expand=True)
    for col in ("tier", "rule", "where", "since (event time)", "summary"):
        alerts.add_column(col)
    for a in sorted(engine.open_alerts(), key=lambda a: (a.tier.value != "critical", a.started_at)):
        where = " ".join(f"{k}={a.labels[k]}" for k in ("node", "gpu", "task") if k in a.labels)
        alerts.add_row(f"[{_TIER_STYLE[a.tier.value]}]{a.tier.value}[/]", a.rule, where,
                       f"{now - a.started_at:.0f} s ago", a.summary[:120])
    return Group(gpus, tasks, alerts)
