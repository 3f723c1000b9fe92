"""The real H200 recordings and how they are replayed through the default pack: shared by
tests/streams/test_real_recordings.py and bench/rules_table.py (the real-recordings column of
docs/rules.md).

Both recordings are shorter than the rules' windows (10-15 min), so each is replayed
time-dilated: every timestamp ``t`` becomes ``t0 + k·(t - t0)`` and the durations a record
carries (a snapshot's ``interval_s``, a step's times) are multiplied by ``k``: the same shapes,
``k`` times slower (a slope in GiB/h is ``k`` times smaller).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuwarden.contract import AlertTransition, NodeSnapshot, TaskMetric, decode, unbatch
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import DEFAULT_RULES, compile_rules, load_rule_file

FIXTURES = Path(__file__).parent.parent / "fixtures"
AGENT = FIXTURES / "h200" / "h200-agent.jsonl"
PROBE_RAW = FIXTURES / "h200-leak-probe" / "h200-leak-probe.jsonl"
PROBE = FIXTURES / "h200-leak-probe" / "h200-leak-probe.records.jsonl"

#: recording -> (its records, the dilation that fills the rules' windows, the default rules that
#: fire there: what really happened, see tests/streams/test_real_recordings.py).
REAL_RECORDINGS: dict[str, tuple[Path, float, set[str]]] = {
    "h200-agent": (AGENT, 20, {"data-loader-starvation"}),
    "h200-leak-probe": (PROBE, 60, {"memory-leak"}),
}


def records(path: Path) -> list[Any]:
    return list(unbatch(decode(line) for line in path.read_bytes().splitlines() if line.strip()))


def dilate(recs: list[Any], k: float) -> list[Any]:
    t0 = min(r.ts for r in recs)
    out = []
    for r in recs:
        update: dict[str, Any] = {"ts": t0 + k * (r.ts - t0)}
        if isinstance(r, NodeSnapshot) and r.interval_s:
            update["interval_s"] = r.interval_s * k
        if isinstance(r, TaskMetric):
            update.update({f: getattr(r, f) * k for f in ("step_time_s", "data_wait_s", "comm_s")
                           if getattr(r, f) is not None})
        out.append(r.model_copy(update=update))
    return sorted(out, key=lambda r: r.ts)


def run(recs: list[Any], share: float | None = None) -> list[AlertTransition]:
    """The default pack (``share``: clock-capped's clock share lowered, as a user's override would)."""
    rf = load_rule_file(DEFAULT_RULES)
    if share is not None:
        spec = next(r for r in rf.rules if r.name == "clock-capped")
        loss = next(c.threshold for c in spec.when.all if c.threshold.metric == "cap_clock_loss")
        loss.value = share
    engine = Engine(compile_rules(rf, "<test>"), EngineConfig())
    return engine.process_many(recs) + engine.flush()


def firing(transitions: list[AlertTransition]) -> set[tuple[str, str]]:
    return {(t.rule, t.tier) for t in transitions if t.state == "firing"}
