"""Which default rule each simulator scenario must fire, at which tier, within which delay.

Shared by tests/streams/test_scenarios.py and bench/rules_table.py (which measures the
delays and false alerts for docs/rules.md). Delays count from the scenario's onset.
Every rule of the default pack has at least one case (tests/streams/test_scenarios.py checks).
"""

from __future__ import annotations

from gpuwarden.units import parse_duration

ONSET_S = 180.0
START = 1_700_000_000

# scenario, rule, tier, max detection delay (s), run span, extra `gpuwarden run` args, engine config
CASES: list[tuple[str, str, str, float, str, tuple[str, ...], dict]] = [
    ("memory-leak", "memory-leak", "attention", 1800, "1h", (), {}),
    ("memory-leak", "oom-risk", "attention", 6.5 * 3600, "7h", (), {}),
    ("dataloader-starvation", "data-loader-starvation", "attention", 900, "30m", (), {}),
    ("dataloader-starvation", "util-below-baseline", "attention", 1800, "2h",
     ("--nodes", "4", "--onset", "1h"), {"observation_period": "45m"}),
    # The simulator's starvation halves utilization (94 -> 45 %), at the rule's edge (1,240 s on it
    # alone); GPM's SM and tensor activity fall below half with it (89 -> 43 %, 52 -> 25 %): 460 s.
    ("dataloader-starvation", "job-fell-below-own-hour", "attention", 600, "2h",
     ("--nodes", "4", "--onset", "1h"), {"observation_period": "45m"}),
    ("comm-bound", "communication-bound", "attention", 900, "30m", (), {}),
    ("thermal-throttle", "thermal-slowdown", "critical", 600, "30m", (), {}),
    ("thermal-throttle", "temp-rising-constant-power", "attention", 600, "30m", (), {}),
    ("power-cap", "power-brake", "critical", 600, "30m", (), {}),
    ("power-cap", "hw-slowdown", "critical", 600, "30m", (), {}),
    ("power-cap", "clock-capped", "info", 900, "30m", (), {}),
    ("thermal-throttle", "clock-capped", "info", 900, "30m", (), {}),
    ("power-limit-lowered", "clock-capped", "info", 900, "30m", (), {}),
    ("power-limit-lowered", "clock-capped-slower", "attention", 2400, "2h",
     ("--nodes", "4", "--onset", "1h"), {"observation_period": "45m"}),
    ("xid-79", "xid-hardware", "critical", 30, "10m", (), {}),
    ("xid-79", "gpu-lost", "critical", 30, "10m", (), {}),
    ("ecc-dbe", "ecc-double-bit", "critical", 30, "10m", (), {}),
    ("ecc-dbe", "row-remap", "critical", 60, "10m", (), {}),
    ("ecc-dbe", "xid-hardware", "critical", 30, "10m", (), {}),
    ("row-remap-pending", "row-remap", "critical", 300, "15m", (), {}),
    ("row-remap-pending", "ecc-single-bit-rising", "info", 300, "15m", (), {}),
    ("row-remap-pending", "xid-other", "info", 300, "15m", (), {}),
    # Idle while allocated: within 10 min of the GPUs going idle (issue #30).
    ("idle-allocated", "idle-allocated-gpu", "info", 600, "45m", (), {}),
    ("idle-allocated", "idle-allocated-job", "attention", 600, "45m", (), {}),
    ("idle-allocated", "idle-allocated-budget", "attention", 2.25 * 3600, "2.5h", (), {}),
    # An hour of the job's own history first; no class baseline (observation_period 1 d).
    ("idle-allocated", "job-fell-below-own-hour", "attention", 600, "80m", ("--onset", "1h"), {}),
    # Utilization and power hold while tensor activity falls to 5 % of the job's own (GPM).
    ("tensor-fallback", "job-fell-below-own-hour", "attention", 600, "80m", ("--onset", "1h"), {}),
    ("mixed", "version-skew", "attention", 300, "15m", ("--nodes", "2"), {}),
    # Escalations count from the onset: the repeat lands 300 s later (120 s requeue gap + 180 s run).
    ("xid-app-error", "xid-application", "attention", 30, "10m", (), {}),
    ("xid-app-error", "xid-repeated", "critical", 420, "10m", (), {}),
    ("xid-node-repeat", "xid-node-repeated", "critical", 420, "10m", (), {}),
    ("xid-node-repeat", "xid-hardware", "critical", 30, "10m", (), {}),
    ("xid-154", "gpu-recovery-reset", "critical", 30, "10m", (), {}),
    ("xid-154", "gpu-recovery-reboot", "critical", 30, "10m", (), {}),
    ("xid-154", "gpu-recovery-drain-p2p", "critical", 30, "10m", (), {}),
    ("driver-error", "driver-error", "critical", 30, "10m", (), {}),
    ("driver-error", "gpu-lost", "critical", 120, "10m", (), {}),
    # The scheduler stage's coded rules (docs/scheduler.md), on the simulated cluster's polls.
    ("queue-buildup", "scheduler-wait-above-baseline", "attention", 3900, "75m", (), {}),
    ("fragmentation", "scheduler-fragmentation", "attention", 660, "15m", (), {}),
    ("preemption-storm", "scheduler-requeued", "info", 660, "25m", (), {}),
    ("preemption-storm", "scheduler-requeued-repeatedly", "attention", 1260, "25m", (), {}),
    ("gpus-unused", "job-gpus-unused", "attention", 600, "40m", (), {}),
    # One node of a 4-node job silently slow (streams/straggler.py): an hour of the job's own history first.
    ("straggler", "job-straggler", "attention", 600, "80m", ("--nodes", "4", "--onset", "1h"), {}),
    # One GPU's PCIe link on the last node trains down: every rank waits in the collectives, the
    # node is named by its link (and the job is communication-bound, on every node alike).
    ("straggler-pcie", "job-straggler", "attention", 600, "80m", ("--nodes", "4", "--onset", "1h"), {}),
    ("straggler-pcie", "communication-bound", "attention", 900, "80m", ("--nodes", "4", "--onset", "1h"), {}),
    # The lowered limit caps a GPU of the 4-node job: that node holds the others back (340 s).
    ("power-limit-lowered", "job-straggler", "attention", 600, "2h",
     ("--nodes", "4", "--onset", "1h"), {"observation_period": "45m"}),
]
#: Scenarios where a rule must stay quiet (multi-node jobs whose ranks all dip together or differ
#: by design): scenario, rule, run span, extra `gpuwarden run` args.
QUIET_CASES: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("multinode-checkpoints", "job-straggler", "4h", ("--nodes", "4", "--onset", "1h")),
    ("pipeline-parallel", "job-straggler", "4h", ("--nodes", "4", "--onset", "1h")),
    ("multinode-checkpoints", "job-fell-below-own-hour", "4h", ("--nodes", "4", "--onset", "1h")),
]
#: Rules written in code, not in the rule pack (their cases are above).
CODED_RULES = {"scheduler-wait-above-baseline", "scheduler-fragmentation", "scheduler-requeued",
               "scheduler-requeued-repeatedly", "job-gpus-unused"}


def expected_rules() -> dict[str, set[str]]:
    """Rules that may fire above info on each scenario: its cases' rules (``mixed``: every case's)."""
    out: dict[str, set[str]] = {}
    for c in CASES:
        out.setdefault(c[0], set()).add(c[1])
    out["mixed"] = {c[1] for c in CASES}  # mixed runs every fault on some GPU
    return out


def case_run(case: tuple) -> tuple[tuple, list[str], dict]:
    """(run key, `gpuwarden run` arguments, engine config) of a case; cases with one key share a run."""
    scenario, _, _, _, span, args, engine = case
    return ((scenario, span, args, tuple(sorted(engine.items()))),
            ["--simulate", scenario, "--duration", span, "--start", str(START), *args],
            {"observation_period": "1d", **engine})


def onset_ts(args: tuple[str, ...]) -> float:
    """Event time of the fault's onset in a case's run."""
    return START + (parse_duration(args[args.index("--onset") + 1]) if "--onset" in args else ONSET_S)


#: The inference rules on the serving scenarios (``producers/servingsim.py``, onset 70 min in:
#: the rules compare with the hour before), run with the simulator's SLO for its services
#: (``gpuwarden run`` applies it to a simulation whose config declares none).
# scenario, rule, tier, max detection delay from the serving onset (s), run span
INFERENCE_CASES: list[tuple[str, str, str, float, str]] = [
    ("serving-tail", "inference-tail-rising", "attention", 900, "150m"),
    ("serving-tail", "slo-steady-burn", "info", 3600, "150m"),  # 2.5 % bad of all since the start: ~48 min
    ("serving-tail", "slo-over-target", "attention", 300, "150m"),  # ~1.5 % of 5 min over 2.5 s: the objective missed
    ("serving-kv-knee", "inference-kv-knee", "attention", 1200, "90m"),
    ("serving-kv-knee", "inference-preemptions", "attention", 900, "90m"),
    ("serving-deploy", "inference-restarted", "info", 180, "90m"),
    ("serving-deploy", "inference-ttft-regression", "attention", 600, "90m"),
    ("serving-errors", "inference-failures", "attention", 120, "90m"),
    ("serving-errors", "slo-slow-burn", "attention", 600, "90m"),
    ("serving-errors", "slo-fast-burn", "critical", 1020, "90m"),
    ("serving-errors", "slo-over-target", "attention", 300, "90m"),
    ("serving-batch-full", "inference-batch-full", "attention", 900, "90m"),
    # a replica on each of 2 nodes, one aborting 60 %: the service burns at 30x, judged over both
    ("serving-replicas", "inference-failures", "attention", 120, "100m"),
    ("serving-replicas", "slo-slow-burn", "attention", 1200, "100m"),
    ("serving-replicas", "slo-fast-burn", "critical", 1800, "100m"),
    ("serving-replicas", "slo-over-target", "attention", 300, "100m"),
]
