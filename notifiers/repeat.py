"""Repeat offenders: a GPU (or node) whose hardware alerts keep coming back over weeks gets one
"replace or inspect" attention summarising them, and its further hardware alerts are recorded,
not paged, while that attention is open.

Routing policy, like grouping and inhibition: it decides how often people hear about one
failing part, from the alert transitions alone, in their event time (a replay routes the same).
The attention is an alert of its own (rules ``repeat-offender-gpu``/``-node``; fingerprint from
the rule and the part), localised like the default rules (default_rules.zh-CN.yaml), offering a
drain where remediation is on (docs/remediation.md). It resolves once fewer than ``at_least``
hardware alerts of the part remain in the window.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

from gpuwarden.alert_text import fill, template_names
from gpuwarden.contract import SIMULATED_LABEL, AlertState, AlertTransition, Evidence, Tier
from gpuwarden.notifiers.config import RepeatOffenderConfig

GPU_RULE, NODE_RULE = "repeat-offender-gpu", "repeat-offender-node"
#: English templates (the zh-CN catalogue carries each as ``en``, so localisation finds them).
SUMMARY = {GPU_RULE: "{node} GPU {gpu}: {count} hardware alerts within {window} ({history}); replace or inspect it "
                     "instead of a page per event.",
           NODE_RULE: "{node}: {count} hardware alerts within {window} ({history}); replace or inspect it instead "
                      "of a page per event."}
ACTION = ("Drain it, run field diagnostics (dcgmi diag -r 3) and replace or RMA the part if they fail; its further "
          "hardware alerts are recorded, not paged, while this is open.")


@dataclass
class _Part:
    node: str
    gpu: str
    seen: list[tuple[float, str]] = field(default_factory=list)  # (started_at, rule) of each hardware firing
    open: AlertTransition | None = None


class RepeatOffenders:
    """Feed every transition through :meth:`observe` (and time through :meth:`tick`); route what
    they return instead."""

    def __init__(self, config: RepeatOffenderConfig) -> None:
        self.config = config
        self.parts: dict[str, _Part] = {}
        self.demoted: set[str] = set()  # fingerprints whose firing went out as info: so goes their resolve

    def observe(self, t: AlertTransition) -> list[AlertTransition]:
        cfg = self.config
        if not cfg.enabled or t.rule not in cfg.rules or "node" not in t.labels:
            return [t]
        if t.state is AlertState.RESOLVED:
            return [self._demote(t) if t.fingerprint in self.demoted else t]
        node, gpu = t.labels["node"], t.labels.get("gpu", "")
        part = self.parts.setdefault(f"{node}\x1f{gpu}", _Part(node, gpu))
        if (t.started_at, t.rule) not in part.seen:  # an update of an open alert is not a new one
            part.seen.append((t.started_at, t.rule))
        part.seen = [s for s in part.seen if s[0] > t.ts - cfg.window]
        if len(part.seen) < cfg.at_least:
            return [t] if t.fingerprint not in self.demoted else [self._demote(t)]
        out = []
        if part.open is None:
            part.open = self._offender(part, t)
            out.append(part.open)
        self.demoted.add(t.fingerprint)
        return [*out, self._demote(t)]

    def tick(self, now: float) -> list[AlertTransition]:
        """Resolve the attentions whose parts fell below ``at_least`` in the window by ``now``."""
        out = []
        for key, part in list(self.parts.items()):
            part.seen = [s for s in part.seen if s[0] > now - self.config.window]
            if part.open is not None and len(part.seen) < self.config.at_least:
                out.append(part.open.model_copy(update={"ts": now, "state": AlertState.RESOLVED, "ended_at": now}))
                part.open = None
            if not part.seen and part.open is None:
                del self.parts[key]
        return out

    def _offender(self, part: _Part, t: AlertTransition) -> AlertTransition:
        rule = GPU_RULE if part.gpu else NODE_RULE
        labels = {"node": part.node, **({"gpu": part.gpu} if part.gpu else {})}
        labels["history"] = ", ".join(f"{r} ×{n}" for r, n in sorted(Counter(r for _, r in part.seen).items()))
        if SIMULATED_LABEL in t.labels:
            labels[SIMULATED_LABEL] = t.labels[SIMULATED_LABEL]
        first = min(s for s, _ in part.seen)  # seen in arrival order: a stage's alert may come after a later one
        ev = Evidence(count=len(part.seen), window_s=self.config.window, held_for_s=max(0.0, t.ts - first))
        names = template_names(labels, ev.model_dump(exclude_none=True))
        fp = hashlib.sha256(f"{rule}\x1f{part.node}\x1f{part.gpu}".encode()).hexdigest()[:20]
        return AlertTransition(ts=t.ts, fingerprint=fp, rule=rule, tier=Tier.ATTENTION, state=AlertState.FIRING,
                               labels=labels, started_at=t.ts, summary=fill(SUMMARY[rule], names),
                               action=ACTION, evidence=ev)

    @staticmethod
    def _demote(t: AlertTransition) -> AlertTransition:
        return t.model_copy(update={"tier": Tier.INFO})

    # ------------------------------------------------------------------ state in the spool

    def dump(self) -> bytes:
        return json.dumps({"demoted": sorted(self.demoted), "parts": [
            {"node": p.node, "gpu": p.gpu, "seen": p.seen, "open": p.open.model_dump(mode="json") if p.open else None}
            for p in self.parts.values()]}).encode()

    def load(self, data: bytes) -> None:
        doc = json.loads(data)
        self.demoted = set(doc["demoted"])
        self.parts = {}
        for p in doc["parts"]:
            part = _Part(p["node"], p["gpu"], [(float(ts), r) for ts, r in p["seen"]],
                         AlertTransition.model_validate(p["open"]) if p["open"] else None)
            self.parts[f"{part.node}\x1f{part.gpu}"] = part
