"""Which default rule each simulator scenario must fire, at which tier, within which delay.

Shared by tests/streams/test_scenarios.py and bench/rules_table.py (which measures the
delays and false alerts for docs/rules.md). Delays count from the scenario's onset.
"""

from __future__ import annotations

ONSET_S = 180.0

# scenario, rule, tier, max detection delay (s), run span, extra `gpuwarden run` args, engine config
CASES: list[tuple[str, str, str, float, str, tuple[str, ...], dict]] = [
    ("memory-leak", "memory-leak", "attention", 1800, "1h", (), {}),
    ("memory-leak", "oom-risk", "attention", 6.5 * 3600, "7h", (), {}),
    ("dataloader-starvation", "data-loader-starvation", "attention", 900, "30m", (), {}),
    ("dataloader-starvation", "util-below-baseline", "attention", 1800, "2h",
     ("--nodes", "4", "--onset", "1h"), {"observation_period": "45m"}),
    ("comm-bound", "communication-bound", "attention", 900, "30m", (), {}),
    ("thermal-throttle", "thermal-slowdown", "critical", 600, "30m", (), {}),
    ("thermal-throttle", "temp-rising-constant-power", "attention", 600, "30m", (), {}),
    ("power-cap", "power-brake", "critical", 600, "30m", (), {}),
    ("power-cap", "hw-slowdown", "critical", 600, "30m", (), {}),
    ("xid-79", "xid-hardware", "critical", 30, "10m", (), {}),
    ("xid-79", "gpu-lost", "critical", 30, "10m", (), {}),
    ("ecc-dbe", "ecc-double-bit", "critical", 30, "10m", (), {}),
    ("ecc-dbe", "row-remap", "critical", 60, "10m", (), {}),
    ("ecc-dbe", "xid-hardware", "critical", 30, "10m", (), {}),
    ("row-remap-pending", "row-remap", "critical", 300, "15m", (), {}),
    ("row-remap-pending", "ecc-single-bit-rising", "info", 300, "15m", (), {}),
    ("row-remap-pending", "xid-other", "info", 300, "15m", (), {}),
    ("idle-allocated", "idle-allocated-gpu", "info", 35 * 60, "45m", (), {}),
    ("idle-allocated", "idle-allocated-budget", "attention", 2.25 * 3600, "2.5h", (), {}),
    ("mixed", "version-skew", "attention", 300, "15m", ("--nodes", "2"), {}),
]
