"""Simulated GPU fleet behind the same interface as the NVML collector.

Deterministic for a seed: every node and GPU draws from its own
``random.Random`` seeded from (seed, node, gpu), and time is event time only
(``start_ts`` + ticks), so the same arguments always give the same records.

Layout of every node: the first half of the GPUs (at least one) run one
multi-GPU, multi-node training job (``llama-pretrain``); each remaining GPU runs
a single-GPU job whose class cycles through ``sd-finetune``, ``vllm-serve``,
``resnet-train``, ``bert-finetune``. Short jobs end and restart (same class and
owner, new task id) so per-class baselines see several runs. Faults start at
``onset_s`` (default 180 s) after ``start_ts``; which GPU each fault hits and
what a correct monitor should say are in :data:`SCENARIOS` and docs/scenarios.md.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from gpuwarden import clocks
from gpuwarden.contract import (
    EventKind,
    GpuEvent,
    GpuProcess,
    GpuSample,
    InferenceMetrics,
    NodeSnapshot,
    TaskMetric,
    TaskMetricKind,
)
from gpuwarden.producers.gpumodels import MIB, GpuModel, bus_id, model
from gpuwarden.producers.schedsim import CLUSTER_SCENARIOS, ClusterSim
from gpuwarden.producers.servingsim import ServingSim
from gpuwarden.producers.events import XID_RECOVERY, recovery_action_name
from gpuwarden.producers.xid import lookup

#: XID 154's recovery actions the ``xid-154`` scenario reports, by GPU index in turn (nvml.h
#: values), and the words its kernel-log line gives them (the agent reads only the value).
RECOVERY_CYCLE = (1, 2, 3)
RECOVERY_WORDS = {1: "GPU Reset Required", 2: "Node Reboot Required", 3: "Drain P2P"}

AGENT_VERSION = "gpuwarden-sim/0.1"
DRIVER, CUDA = "550.127.05", "12.4"
SKEWED_DRIVER = "550.90.07"
DEFAULT_ONSET_S = 180.0
LEAK_MIB_PER_MIN = 200.0
THERMAL_C_PER_MIN = 6.0
THROTTLE_AT_C = 87.0
LOWERED_LIMIT = 0.6
"""``power-limit-lowered``: the enforced power limit as a share of the board's default."""
GPM_EVERY_S = 15.0
STRAGGLER_SLOW = 1.25
"""``straggler``: the slow node computes a step this many times as long (its SM clock 1/this)."""
PCIE_DEGRADED = (3, 8)
"""``straggler-pcie``: the (generation, width) one GPU of the slow node's link trains down to (from Gen5 x16)."""
PCIE_SLOW = 1.5
"""``straggler-pcie``: the job's step takes this many times as long, all of it in communication."""
STAGE_COMPUTE = (0.62, 0.70, 0.70, 0.80)
"""``pipeline-parallel``: each stage's (node's) compute share of a step; the rest is its bubble."""
STAGE_TENSOR = (0.55, 0.72, 0.72, 0.80)
TENSOR_LEFT, FALLBACK_SLOW = 0.05, 3.0
"""``tensor-fallback``: the share of its tensor activity the job keeps, and how many times as long
its step takes (its math on the CUDA cores: FP32 at a fraction of bf16's tensor-core rate)."""
"""``pipeline-parallel``: each stage's tensor-pipe share while it computes (embeddings, layers, head)."""
CKPT_EVERY_S, CKPT_LEN_S, CKPT_STAGGER_S = 600.0, 60.0, 5.0
"""``multinode-checkpoints``: a checkpoint every 10 min for 60 s, each node entering it 5 s after the one before."""
EVAL_EVERY_S, EVAL_LEN_S = 1800.0, 240.0
"""``multinode-checkpoints``: a 4-min evaluation at the end of every 30 min, all ranks at ~38 % utilisation."""
RESTART_GAP_S = 120.0
STRIKES = 2
"""A recurring job fault fails the job this many times: once at onset, once more in the requeued run."""
STRIKE_AFTER_S = 180.0
"""How long the requeued run works before the recurring fault fails it again."""
APP_XID_TEXT = {
    13: "name=python, Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address",
    31: "name=python, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_2 faulted "
        "@ 0x7f3a_9c200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
}
NVLINK_XID_TEXT = "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"

Record = NodeSnapshot | GpuEvent | TaskMetric | InferenceMetrics


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True, slots=True)
class ScenarioInfo:
    name: str
    description: str
    expected: list[str]
    placement: str = "none"
    """Which GPU a fault hits: ``single`` (a single-GPU job's GPU), ``multi`` (the
    multi-GPU job, all its GPUs), ``hw`` (a GPU of the multi-GPU job) or ``node`` (the
    multi-GPU job's GPUs on the last node); ``serving``: a simulated vLLM service of its own
    (``servingsim.py``), on the nodes in turn."""
    in_mixed: bool = True
    """False for faults ``mixed`` leaves out: they would erase other faults' signatures there, or
    (``tensor-fallback``) need an hour of their job's own history that mixed's onset does not give."""
    nodes: int = 1
    """The nodes a run of it simulates unless told (``serving-replicas``: a replica on each of 2)."""


def _info(name: str, placement: str, description: str, *expected: str, in_mixed: bool = True,
          nodes: int = 1) -> ScenarioInfo:
    return ScenarioInfo(name, description, list(expected), placement, in_mixed, nodes)


SCENARIOS: dict[str, ScenarioInfo] = {s.name: s for s in (
    _info("healthy", "none",
          "Steady training and serving jobs; memory plateaus and drops back after every checkpoint.",
          "no alert above info on any node or GPU"),
    _info("memory-leak", "single",
          f"From onset the process on the target GPU grows {LEAK_MIB_PER_MIN:.0f} MiB/min, monotonic, "
          "never released at checkpoints; at ~97% of memory the task reports OOM, exits and restarts "
          "(and leaks again).",
          "attention: memory leak on sim-node-00 gpu 4 (sd-finetune, user alice) within 30 min of onset "
          "(rising memory, not released at checkpoint_end)",
          "attention/critical: OOM of that task when memory runs out (hours later)"),
    _info("dataloader-starvation", "single",
          "From onset the target job waits on its data loader for ~55% of each step: step time x2.2, "
          "GPU utilization and power fall.",
          "attention: data-loader starvation of the task on sim-node-00 gpu 4 (data_wait share ~0.55 vs "
          "class baseline ~0.05, low util) within 10 min of onset"),
    _info("comm-bound", "multi",
          "From onset the multi-node llama-pretrain job spends ~45% of each step in communication: "
          "step time x1.6; util stays high (NCCL kernels) while tensor activity and power fall.",
          "attention: llama-pretrain communication-bound (comm share ~0.45 vs baseline ~0.12, "
          "step time up) within 10 min of onset"),
    _info("thermal-throttle", "hw",
          f"From onset the target GPU's temperature rises ~{THERMAL_C_PER_MIN:.0f} °C/min at constant "
          f"power (cooling fault); at {THROTTLE_AT_C:.0f} °C it sets HW thermal slowdown (0x40) and its "
          "SM clock drops ~28%, slowing the whole job.",
          "info/attention: temperature rising at constant power on sim-node-00 gpu 3 (within 5 min of onset)",
          "attention: HW thermal slowdown (0x40) on sim-node-00 gpu 3, clocks down, ~5 min after onset",
          "info: clock-capped on sim-node-00 gpu 3 (SM clock ~20% below max), likely cause cooling"),
    _info("power-cap", "hw",
          "From onset the target GPU intermittently asserts HW power brake (0x80) with HW slowdown "
          "(0x8): SM clock ~55% of max, power ~45% of limit, job step time up.",
          "attention: HW power brake / HW slowdown on sim-node-00 gpu 3 held for minutes (check PSU/BMC)",
          "info: clock-capped on sim-node-00 gpu 3, likely cause the board's power delivery"),
    _info("power-limit-lowered", "hw",
          f"From onset the target GPU's power limit is lowered to {LOWERED_LIMIT:.0%} of its default "
          "(nvidia-smi -pl): under load it sits at the new limit with the SW power cap (0x4) set, its SM "
          "clock ~22% below max, and the whole job's step time rises ~30%.",
          "info: clock-capped on sim-node-00 gpu 3, likely cause 'power limit lowered', within 15 min of onset",
          "attention: clock-capped-slower of llama-pretrain on sim-node-00 once the class has a baseline "
          "(step time above its band while the GPU is capped)",
          in_mixed=False),
    _info("straggler", "node",
          f"From onset the multi-node llama-pretrain job's GPUs on the last node run at "
          f"{1 / STRAGGLER_SLOW:.0%} of their SM clock with no clock-event reason (a cap NVML does not "
          f"report): each step takes {STRAGGLER_SLOW:.2f}x as long; the other nodes' GPUs wait in "
          "communication (comm share 0.12 -> 0.30, utilisation still high from NCCL kernels, tensor "
          "activity and power down) while the slow node computes the whole step (tensor activity up "
          "against theirs, power down with its clock).",
          "attention: job-straggler naming the last node (sim-node-03 of 4) and its llama-pretrain GPUs "
          "within 10 min of onset: SM clock ~80 % of its peers', tensor activity above theirs, step time "
          "up; likely cause a clock held down with no reason reported",
          in_mixed=False, nodes=4),
    _info("straggler-pcie", "node",
          f"From onset the PCIe link of the multi-node llama-pretrain job's first GPU on the last node "
          f"trains down to Gen{PCIE_DEGRADED[0]} x{PCIE_DEGRADED[1]} (its GPU and slot allow Gen5 x16: "
          f"a riser or slot fault): that GPU's transfers, its share of the job's inter-node traffic "
          f"among them, move at an eighth of the bandwidth, and every rank waits for them in the same "
          f"collectives: each step takes {PCIE_SLOW:.1f}x as long, all of it communication (comm share "
          f"0.12 -> {1 - 0.02 - 0.86 / PCIE_SLOW:.2f}), on every node alike; clocks and tensor activity "
          "stay level across the nodes.",
          "attention: job-straggler naming the last node (sim-node-03 of 4) and its llama-pretrain GPUs "
          f"within 10 min of onset: clock and tensor activity level with its peers', step time "
          f"+{PCIE_SLOW - 1:.0%}; likely cause its PCIe link at Gen{PCIE_DEGRADED[0]} x{PCIE_DEGRADED[1]} "
          "where its peers run Gen5 x16",
          "attention: communication-bound of llama-pretrain (comm share ~0.41)",
          in_mixed=False, nodes=4),
    _info("multinode-checkpoints", "multi",
          f"The healthy multi-node llama-pretrain job, from onset checkpointing every "
          f"{CKPT_EVERY_S / 60:.0f} min for {CKPT_LEN_S:.0f} s (each node entering it "
          f"{CKPT_STAGGER_S:.0f} s after the one before) and running a {EVAL_LEN_S / 60:.0f}-min "
          f"evaluation at the end of every {EVAL_EVERY_S / 60:.0f} min: every rank dips together.",
          "no job-straggler alert", in_mixed=False, nodes=4),
    _info("pipeline-parallel", "multi",
          "llama-pretrain runs as pipeline stages, one per node, from the start: each stage computes "
          f"its own share of a step ({', '.join(f'{c:.2f}' for c in STAGE_COMPUTE)}; the rest is its "
          "pipeline bubble) with its own tensor activity, so the nodes' utilisation, tensor activity "
          "and power differ, steadily; the clocks do not.",
          "no job-straggler alert (the stages are compared with their own usual ratios)",
          in_mixed=False, nodes=4),
    _info("xid-79", "single",
          "At onset the target GPU falls off the bus: XID 79 then gpu_lost; afterwards its samples "
          "carry only index/uuid/name (every reading null) and its task exits with an error.",
          "critical: XID 79 (GPU fallen off the bus) on sim-node-00 gpu 4, action RESTART_BM, at onset",
          "critical: gpu_lost on sim-node-00 gpu 4"),
    _info("ecc-dbe", "single",
          "At onset a double-bit ECC error: ecc_dbe event, XID 48, uncorrected ECC counters +1, a "
          "remapped row and remap pending; the task on the GPU exits with an error.",
          "critical: double-bit ECC (XID 48) on sim-node-00 gpu 4 at onset, action WORKFLOW_XID_48 / reset",
          "attention: row remap pending on sim-node-00 gpu 4 (reset the GPU when drained)"),
    _info("row-remap-pending", "hw",
          "From onset corrected (single-bit) ECC errors climb on the target GPU; 240 s later a row is "
          "remapped: remap_pending true, XID 63 and a row_remap event. Work continues.",
          "info: rising corrected ECC errors on sim-node-00 gpu 3 from onset",
          "attention: row remap pending on sim-node-00 gpu 3 ~4 min after onset (drain, then reset)"),
    _info("idle-allocated", "single",
          "From onset the target task stops working but keeps its memory: util ~0, idle power, no "
          "step metrics, for hours.",
          "info and attention ~8 min after onset (idle-allocated-gpu, idle-allocated-job), attention by "
          "idle card-hours after ~2 h: sim-node-00 gpu 4 allocated (process holds memory) with util ~0, "
          "owner alice"),
    _info("tensor-fallback", "single",
          "From onset the target job's matmuls run on the CUDA cores, not the tensor cores (as "
          "when mixed precision or TF32 is turned off): GPU utilization and SM activity stay where they "
          f"were, tensor activity falls to {TENSOR_LEFT:.0%} of its own, power ~15 % lower, step time "
          f"x{FALLBACK_SLOW:.0f}.",
          "attention: job-fell-below-own-hour on sim-node-00 gpu 4's job (sd-finetune, alice) "
          "within 10 min of onset, likely cause its math left the tensor cores (run with --onset 1h: "
          "the rule compares the job with its own hour before)",
          in_mixed=False),
    _info("serving-healthy", "serving",
          "A vLLM service (chat, qwen2-72b) under a diurnal load (8 req/s ±50 %): TTFT p99 ≤ 1 s, "
          "KV cache 20-55 %, 0.2 % of requests aborted.",
          "no alert above info, for 7 simulated days"),
    _info("serving-tail", "serving",
          "From onset 3 % of chat-tail's requests take ~3 s to the first token while the others "
          "speed up: the mean TTFT stays flat, the p99 moves from (0.75, 1] s to (2.5, 5] s.",
          "attention: inference-tail-rising (ttft and e2e) on chat-tail ~3 min after onset "
          "(serving scenarios start 70 min in: the rules compare with the hour before)",
          "attention: slo-over-target of ttft_p99 ~3 min after onset (~1.5 % of the last 5 min over 2.5 s "
          "against 1 % allowed: a 1.5x burn no burn-rate pair reaches)",
          "info: slo-steady-burn of ttft_p99 ~50 min after onset (~2.5 % over 2.5 s against a 1 % "
          "budget, over all the traffic since the start)"),
    _info("serving-kv-knee", "serving",
          "From onset chat-knee's load grows by 16 req/s over 10 min: the KV cache fills (≥ 90 %), "
          "requests queue and running ones are preempted.",
          "attention: inference-kv-knee (add replicas or reduce max batch) and "
          "inference-preemptions on chat-knee within 15 min of the cache filling"),
    _info("serving-deploy", "serving",
          "At onset chat-deploy restarts (a deploy: new pid, counters from zero, 60 s down) and its "
          "TTFT is 3.5x slower after it.",
          "info: inference-restarted on chat-deploy ~1 min after onset",
          "attention: inference-ttft-regression (p90 ≤ 2.5 s after vs ≤ 0.5 s before) ~6 min after onset"),
    _info("serving-errors", "serving",
          "From onset 60 % of chat-errors' requests are aborted for 20 min, then it recovers.",
          "attention: inference-failures on chat-errors within 1 min of onset",
          "attention: slo-over-target of error_rate within 1 min of onset",
          "attention: slo-slow-burn of error_rate (1 % budget) ~8 min after onset",
          "critical: slo-fast-burn of error_rate ~15 min after onset (60 % failed for 14.4 of 60 min)"),
    _info("serving-batch-full", "serving",
          "chat-batch runs with a small max batch (48); from onset its load grows by 8 req/s over 10 "
          "min: the batch is full and requests wait while the KV cache has room.",
          "attention: inference-batch-full on chat-batch ~10 min after onset"),
    _info("serving-replicas", "serving",
          "chat-replicas runs a replica on each node (2 by default); from onset the one on sim-node-00 "
          "aborts 60 % of its requests, the other none: 30 % of the service's.",
          "attention: inference-failures on chat-replicas on sim-node-00 within 1 min of onset",
          "attention: slo-over-target of error_rate for the service within 1 min of onset",
          "attention: slo-slow-burn of error_rate for the service (both nodes: a 30x burn, not the "
          "bad replica's 60x) ~16 min after onset",
          "critical: slo-fast-burn of error_rate for the service ~28 min after onset (30 k/60 >= 14.4)",
          in_mixed=False, nodes=2),
    _info("queue-buildup", "none",
          "The scheduler's batch partition (2 unsampled nodes of 4 GPUs): a 1-GPU job every 2 min waits "
          "1 min, until 25 min after onset a sweep takes every GPU for 2 h: new jobs wait ever longer, "
          "at most 16 at a time (users submit no more), and drain after it.",
          "attention: scheduler-wait-above-baseline for batch/1 once the median wait passes 10 min and "
          "holds for 3 periods (~1 h after onset)"),
    _info("fragmentation", "none",
          "The scheduler's train partition (2 unsampled nodes of 4 GPUs, a 2-GPU job on each): from "
          "onset a 4-GPU job waits with 4 GPUs free in total and no node with 4.",
          "attention: scheduler-fragmentation of job t3 ~10 min after onset, naming tn-0 and tn-1 with "
          "2 free GPUs each"),
    _info("preemption-storm", "none",
          "The scheduler's spot partition: from onset a 2-GPU job is preempted every 5 min (pending "
          "1 min, then running again), 6 times.",
          "info: scheduler-requeued of job s1 at its 2nd preemption (~10 min after onset)",
          "attention: scheduler-requeued-repeatedly at its 4th (~20 min after onset)"),
    _info("gpus-unused", "none",
          "An extra node runs an 8-GPU evaluation job (user erin, its own Slurm job); from onset it "
          "works on 2 of its GPUs, the others idle with no process, while Slurm counts all allocated.",
          "attention: job-gpus-unused for that job on the extra node (holds 8, uses 2) ~30 min after "
          "onset, owner erin"),
    _info("mixed", "none",
          "A busy multi-user cluster: every fault above on a different GPU (spread over nodes), "
          "every serving scenario as a vLLM service of its own, "
          "plus driver-version skew: the last node of the multi-node job runs an older driver "
          f"({SKEWED_DRIVER} vs {DRIVER}; needs nodes >= 2), plus the scheduler scenarios.",
          "each fault scenario's alerts, on its GPU (see docs/scenarios.md for the placement)",
          "attention: driver version skew within task llama-pretrain (node-01 differs)"),
    _info("xid-app-error", "single",
          "At onset the training job on the target GPU hits XID 13 (Graphics Engine Exception) then "
          "XID 31 (MMU fault) and exits with an illegal memory access; Slurm requeues it once (new task "
          f"id) and the requeued run fails the same way {STRIKE_AFTER_S:.0f} s after it starts (XID 31 "
          "again); it is not requeued again and the GPU stays empty.",
          "attention: xid-application on sim-node-00 gpu 4 (sd-finetune, user alice) at onset: XID 13 "
          "and XID 31, catalogue action RESTART_APP (check the application's log, restart it)",
          "critical: xid-repeated on sim-node-00 gpu 4 ~5 min after onset, when the requeued run fails "
          "with a third XID on the same GPU within the hour (suspect the GPU: dcgmi diag)",
          "no xid-node-repeated: a single GPU with 3 XIDs (the node rule needs 4)",
          in_mixed=False),
    _info("xid-node-repeat", "hw",
          "NVLink fabric fault on the target node: at onset two GPUs of the multi-node job (gpu 3 and "
          "gpu 2 of sim-node-00; needs gpus >= 2) report XID 74 (NVLink error) and the job exits with an "
          f"NCCL error; the requeued job hits XID 74 on both GPUs again {STRIKE_AFTER_S:.0f} s after "
          "it starts and is not requeued again.",
          "critical: xid-hardware on sim-node-00 gpu 3 and gpu 2 at onset (XID 74, action "
          "WORKFLOW_NVLINK_ERR)",
          "critical: xid-node-repeated on sim-node-00 ~5 min after onset, when the 4th XID within the "
          "hour lands on the node's GPUs (drain the node, check NVSwitch/baseboard)",
          in_mixed=False),
    _info("xid-154", "node",
          "At onset each GPU of the last node reports XID 154, the driver's own recovery action (R610+): "
          "'GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)', in turn by GPU "
          "index GPU reset, node reboot and drain peer-to-peer; the event carries the action (the agent "
          "reads it from NVML, else from that line). Jobs go on (the driver asks, it does not stop them).",
          "critical: gpu-recovery-reset, gpu-recovery-reboot and gpu-recovery-drain-p2p on the node's "
          "GPUs at onset, each offering a drain (docs/remediation.md)",
          in_mixed=False),
    _info("driver-error", "single",
          "At onset the driver loses the target GPU and fails to re-initialise it: the kernel log reads "
          "'NVRM: GPU 0000:xx:00.0: RmInitAdapter failed! (0x26:0x65:1457)' and '... rm_init_adapter "
          "failed, device minor number N' (kind=driver events with the GPU's bus id), the job on it "
          "exits with an error and the GPU returns no readings from then on.",
          "critical: driver-error on sim-node-00 at onset (2 driver errors; check dmesg and driver/firmware, "
          "drain and reboot)",
          "critical: gpu-lost on sim-node-00 gpu 4 (no readings after the failed initialisation)",
          in_mixed=False),
)}

FAULTS = [n for n, s in SCENARIOS.items() if s.placement in ("single", "multi", "hw", "node")]
SERVING = [n for n, s in SCENARIOS.items() if s.placement == "serving"]
MIXED_FAULTS = [n for n in FAULTS if SCENARIOS[n].in_mixed]


# --------------------------------------------------------------------------- task classes


@dataclass(frozen=True, slots=True)
class TaskClass:
    name: str
    serve: bool
    mem_frac: float
    step_s: float
    data_share: float
    comm_share: float
    tensor: float
    ckpt_every_s: float
    ckpt_len_s: float
    run_s: float | None
    unit: str
    per_step: float
    user: str
    uid: int
    project: str
    command: str
    k8s: bool = False


LLAMA = TaskClass("llama-pretrain", False, 0.78, 2.4, 0.02, 0.12, 0.72, 1800, 90, None,
                  "tokens/s", 4 * 4096 * 8, "chen", 1003, "foundation-models",
                  "python -m torch.distributed.run train_llama.py --config 70b.yaml")
EVAL = TaskClass("llm-eval", False, 0.5, 1.2, 0.05, 0.05, 0.6, 0, 0, None, "samples/s", 8, "erin", 1005,
                 "evals", "python eval_harness.py --shards 8")
SINGLE = (
    TaskClass("sd-finetune", False, 0.45, 0.9, 0.05, 0.0, 0.55, 1200, 30, 8 * 3600,
              "samples/s", 16, "alice", 1001, "vision", "python finetune_sd.py --lr 1e-5"),
    TaskClass("vllm-serve", True, 0.90, 1.0, 0.0, 0.0, 0.35, 0, 0, None,
              "tokens/s", 2400, "svc-infer", 2001, "serving",
              "python -m vllm.entrypoints.openai.api_server --model qwen2-72b", k8s=True),
    TaskClass("resnet-train", False, 0.30, 0.35, 0.08, 0.0, 0.45, 900, 20, 4 * 3600,
              "samples/s", 256, "bob", 1002, "vision", "python train_resnet.py --epochs 90"),
    TaskClass("bert-finetune", False, 0.25, 0.5, 0.06, 0.0, 0.5, 1200, 25, 3 * 3600,
              "samples/s", 64, "dmitri", 1004, "nlp", "python run_glue.py --model bert-large"),
)


@dataclass(slots=True)
class Job:
    """One run of a task: a task id, processes on one or more GPUs, progress."""

    cls: TaskClass
    task_id: str
    start_ts: float
    gpus: list[GpuSim]
    slurm_job_id: str | None
    pod: tuple[str, str, str, str] | None  # name, namespace, uid, container id
    pids: list[int]
    steps: float = 0.0
    reported_step: int = 0
    last_ckpt: float = 0.0
    ckpt_until: float | None = None
    last_rate_ts: float = -1e18
    ended: bool = False
    exit_pending: bool = False
    exit_code: int | None = None
    exit_message: str = ""

    def slowdown(self) -> float:
        return max((g.slow for g in self.gpus), default=1.0)


# --------------------------------------------------------------------------- GPU state


@dataclass(slots=True)
class GpuSim:
    node: NodeSim
    index: int
    spec: GpuModel
    rng: random.Random
    uuid: str
    faults: set[str] = field(default_factory=set)
    job: Job | None = None
    rank: int = 0
    temp: float = 32.0
    base_temp: float = 32.0
    energy_mj: int = 0
    mem_jitter_mib: float = 0.0
    leak_mib: float = 0.0
    sbe_volatile: int = 0
    sbe_aggregate: int = 0
    dbe: int = 0
    remap_corr: int = 0
    remap_unc: int = 0
    remap_pending: bool = False
    lost: bool = False
    strikes: int = 0
    slow: float = 1.0
    last_hw_reasons: int = 0
    gpm: tuple[float, float, float, float] | None = None
    gpm_ts: float = -1e18

    def sample(self, sim: Simulator, ts: float, dt: float, events: list[GpuEvent]) -> tuple[GpuSample, list[GpuProcess]]:
        spec, rng = self.spec, self.rng
        if self.lost:
            return GpuSample(index=self.index, uuid=self.uuid, name=spec.name), []
        since = ts - sim.onset_ts
        job = self.job if self.job is not None and not self.job.ended else None
        duty, compute, tensor = _activity(self, job, ts, since)
        # Power follows compute (not comm kernels); clocks and reasons corroborate activity.
        power = spec.idle_power_w + (spec.power_limit_w * 0.86 - spec.idle_power_w) * compute ** 0.9
        power += rng.gauss(0, 6)
        reasons = clocks.IDLE if duty < 0.05 else 0
        sm = spec.sm_idle_mhz if duty < 0.05 else spec.sm_max_mhz - int(abs(rng.gauss(0, 60)))
        self.slow = 1.0
        if "thermal-throttle" in self.faults and since >= 0 and self.temp >= THROTTLE_AT_C:
            reasons |= clocks.HW_THERMAL
            sm, power, self.slow = int(sm * 0.72), power * 0.8, 1.35
        if "straggler" in self.faults and since >= 0 and duty >= 0.05:  # no reason bit: silent
            sm, power = int(sm / STRAGGLER_SLOW), power * 0.85
        if "tensor-fallback" in self.faults and since >= 0 and duty >= 0.05:
            power, self.slow = power * 0.85, FALLBACK_SLOW
        if "power-cap" in self.faults and since >= 0 and duty >= 0.05 and rng.random() < 0.6:
            reasons |= clocks.HW_POWER_BRAKE | clocks.HW_SLOWDOWN
            sm, power, self.slow = int(spec.sm_max_mhz * 0.55), spec.power_limit_w * 0.45, 1.6
        limit = spec.power_limit_w
        if "power-limit-lowered" in self.faults and since >= 0:
            limit = spec.power_limit_w * LOWERED_LIMIT
            if duty >= 0.05 and power > limit * 0.9:
                reasons |= clocks.SW_POWER_CAP
                sm, power, self.slow = int(spec.sm_max_mhz * 0.78) - int(abs(rng.gauss(0, 15))), \
                    limit * 0.99 + rng.gauss(0, 2), 1.3
        if duty >= 0.05 and power > limit * 0.8 and not reasons & clocks.HW_REASONS:
            reasons |= clocks.SW_POWER_CAP
        power = min(max(power, spec.idle_power_w * 0.9), limit)
        # Temperature relaxes toward a power-dependent target; a cooling fault adds a ramp.
        target = 28.0 + 60.0 * power / spec.power_limit_w
        self.base_temp += (target - self.base_temp) * (1.0 - math.exp(-dt / 90.0))
        heat = min(THERMAL_C_PER_MIN * since / 60.0, 30.0) if "thermal-throttle" in self.faults and since >= 0 else 0.0
        self.temp = self.base_temp + heat
        temp = round(self.temp + rng.gauss(0, 0.4))
        self.energy_mj += int(power * dt * 1000)
        hw = reasons & clocks.HW_REASONS
        if hw and hw != self.last_hw_reasons & clocks.HW_REASONS:
            events.append(self.node.event(ts, EventKind.CLOCK_EVENT, self, code=hw,
                                          message="clock event: " + ", ".join(clocks.reason_names(hw))))
        self.last_hw_reasons = reasons
        self._counters(sim, ts, since, events)
        if self.lost:
            return GpuSample(index=self.index, uuid=self.uuid, name=spec.name), []
        procs = self._processes(job, ts, since) if job is not None and not _unused(self, since) else []
        degraded = "straggler-pcie" in self.faults and since >= 0 and self.rank % sim.per_node == 0
        link = PCIE_DEGRADED if degraded else (spec.pcie_gen, 16)
        used_mib = 615 + sum(p.used_memory_bytes or 0 for p in procs) // MIB
        util = duty * 100 + rng.gauss(0, 25 * math.sqrt(duty * (1 - duty)) + 0.5)
        util = int(min(100, max(0, util)))
        if spec.gpm and ts - self.gpm_ts >= GPM_EVERY_S:
            self.gpm_ts = ts
            self.gpm = (min(100.0, round(compute * 92 + rng.random() * 3, 1)),
                        min(100.0, round(compute * 48 + rng.random() * 2, 1)),
                        min(100.0, round(tensor * 100 * compute, 1)),
                        min(100.0, round(compute * 38 + duty * 5 + rng.random() * 2, 1)))
        sm_act, occ, ten, dram = self.gpm if self.gpm is not None else (None, None, None, None)
        s = GpuSample(
            index=self.index, uuid=self.uuid, name=spec.name, mig_mode=False,
            util_gpu=util, util_memory=int(util * 0.3),
            sm_active=sm_act, sm_occupancy=occ, tensor_active=ten, dram_active=dram,
            mem_used_bytes=used_mib * MIB, mem_total_bytes=spec.mem_total_mib * MIB,
            mem_reserved_bytes=(spec.mem_total_mib // 240) * MIB,
            temp_gpu_c=temp, temp_memory_c=temp + 5,
            power_w=round(power, 3), power_limit_w=limit, power_default_limit_w=spec.power_limit_w,
            energy_mj=self.energy_mj,
            clock_sm_mhz=sm, clock_mem_mhz=spec.mem_clock_mhz, clock_sm_max_mhz=spec.sm_max_mhz,
            clock_event_reasons=reasons, clock_event_names=clocks.reason_names(reasons),
            pstate=0,
            ecc_volatile_corrected=self.sbe_volatile, ecc_volatile_uncorrected=self.dbe,
            ecc_aggregate_corrected=self.sbe_aggregate, ecc_aggregate_uncorrected=self.dbe,
            remapped_rows_corrected=self.remap_corr, remapped_rows_uncorrected=self.remap_unc,
            remap_pending=self.remap_pending, remap_failure=False,
            pcie_gen=link[0], pcie_width=link[1], pcie_gen_max=spec.pcie_gen, pcie_width_max=16, pcie_replay_counter=0,
            nvlink_up=spec.nvlinks, nvlink_down=0, fan_pct=None,
        )
        return s, procs

    def _counters(self, sim: Simulator, ts: float, since: float, events: list[GpuEvent]) -> None:
        """Hardware faults that change counters or emit events at a moment."""
        node = self.node
        if since < 0:
            return
        if "row-remap-pending" in self.faults and not self.remap_pending:
            new = self.rng.randint(1, 3) if self.rng.random() < sim.tick_s / 10.0 else 0
            if new:
                self.sbe_volatile += new
                self.sbe_aggregate += new
                events.append(node.event(ts, EventKind.ECC_SBE, self, count=new,
                                         message=f"corrected (single-bit) ECC errors +{new}"))
            if since >= 240:
                self.remap_pending, self.remap_corr = True, self.remap_corr + 1
                events.append(node.xid(ts, self, 63, "Row remapper: New row marked for remapping, "
                                                      "reset gpu to activate."))
                events.append(node.event(ts, EventKind.ROW_REMAP, self,
                                         message="row remap pending (corrected rows +1)"))
        if "ecc-dbe" in self.faults and self.dbe == 0:
            self.dbe, self.remap_unc, self.remap_pending = 1, self.remap_unc + 1, True
            events.append(node.event(ts, EventKind.ECC_DBE, self, message="double-bit ECC error"))
            events.append(node.xid(ts, self, 48, "An uncorrectable double bit error (DBE) has been "
                                                  "detected on GPU in the framebuffer at partition 6, "
                                                  "subpartition 0."))
            sim.crash(self, ts, "CUDA error: uncorrectable ECC error encountered")
        if "xid-79" in self.faults:
            events.append(node.xid(ts, self, 79, "GPU has fallen off the bus."))
            events.append(node.event(ts, EventKind.GPU_LOST, self, message="GPU is lost (NVML_ERROR_GPU_IS_LOST)"))
            self.lost = True
            self.faults.discard("xid-79")
            sim.crash(self, ts, "CUDA error: unspecified launch failure")
        if "xid-154" in self.faults:
            value = RECOVERY_CYCLE[self.index % len(RECOVERY_CYCLE)]
            ev = node.xid(ts, self, XID_RECOVERY, f"GPU recovery action changed from 0x0 (None) to 0x{value:x} "
                          f"({RECOVERY_WORDS[value]})")
            events.append(ev.model_copy(update={
                "recovery_action": recovery_action_name(value),
                "catalogue": ev.catalogue.model_copy(update={"action": recovery_action_name(value)})}))
            self.faults.discard("xid-154")
        if "xid-app-error" in self.faults and self._strike(ts):
            codes = (13, 31) if self.strikes == 1 else (31,)
            for code in codes:
                events.append(node.xid(ts, self, code, APP_XID_TEXT[code]))
            sim.crash(self, ts, "RuntimeError: CUDA error: an illegal memory access was encountered")
        if "xid-node-repeat" in self.faults and self._strike(ts):
            partner = node.gpus[self.index - 1 if self.index else min(1, len(node.gpus) - 1)]
            gpus = [self] if partner is self else [self, partner]
            for g in gpus:
                events.append(node.xid(ts, g, 74, NVLINK_XID_TEXT))
            for g in gpus:
                sim.crash(g, ts, "torch.distributed.DistBackendError: NCCL error: unhandled system error")
        if "driver-error" in self.faults:
            pci = bus_id(self.index)
            for text in ("RmInitAdapter failed! (0x26:0x65:1457)",
                         f"rm_init_adapter failed, device minor number {self.index}"):
                events.append(node.event(ts, EventKind.DRIVER, self, message=f"NVRM: GPU {pci}: {text}"))
            self.lost = True
            self.faults.discard("driver-error")
            sim.crash(self, ts, "RuntimeError: CUDA error: unknown error")

    def _strike(self, ts: float) -> bool:
        """A recurring job fault strikes now: at onset, then once the requeued run has worked a while."""
        job = self.job
        if job is None or job.ended or self.strikes >= STRIKES:
            return False
        if self.strikes and ts - job.start_ts < STRIKE_AFTER_S:
            return False
        self.strikes += 1
        return True

    def _processes(self, job: Job, ts: float, since: float) -> list[GpuProcess]:
        cls, spec, rng = job.cls, self.spec, self.rng
        ramp = min(1.0, (ts - job.start_ts) / 60.0)
        plateau = cls.mem_frac * spec.mem_total_mib * ramp
        self.mem_jitter_mib = min(512.0, max(-512.0, self.mem_jitter_mib + rng.choice((-256, 0, 0, 0, 0, 256)) * (rng.random() < 0.05)))
        mib = plateau + self.mem_jitter_mib * ramp
        bump = 0.03 * spec.mem_total_mib if job.ckpt_until is not None else 0.0
        if "memory-leak" in self.faults and since >= 0:
            # The leak keeps what it touches, checkpoint staging buffers included.
            dt = self.node.sim.tick_s
            self.leak_mib += LEAK_MIB_PER_MIN * dt / 60.0 + (bump * dt / cls.ckpt_len_s if bump else 0.0)
            bump = 0.0
        mib += bump + self.leak_mib
        mib = max(0.0, min(mib, spec.mem_total_mib - 700))
        pod = job.pod
        return [GpuProcess(
            pid=job.pids[self.rank], gpu_index=self.index, gpu_uuid=self.uuid,
            used_memory_bytes=int(mib) * MIB, uid=cls.uid, user=cls.user,
            container_id=pod[3] if pod else None, pod_uid=pod[2] if pod else None,
            pod_name=pod[0] if pod else None, pod_namespace=pod[1] if pod else None,
            slurm_job_id=job.slurm_job_id, task=cls.name, task_id=job.task_id,
            project=cls.project, command=cls.command,
        )]


def _activity(gpu: GpuSim, job: Job | None, ts: float, since: float) -> tuple[float, float, float]:
    """(kernel duty for util, compute share for power/GPM, tensor share) of a GPU now."""
    if job is None or gpu.lost or _unused(gpu, since):
        return 0.0, 0.0, 0.0
    faults = job_faults(job)
    if "idle-allocated" in faults and since >= 0:
        return 0.0, 0.0, 0.0
    if _in_checkpoint(gpu, job, ts, since):
        return 0.12, 0.08, 0.1
    if "multinode-checkpoints" in faults and since >= 0 and since % EVAL_EVERY_S >= EVAL_EVERY_S - EVAL_LEN_S:
        return 0.38, 0.3, job.cls.tensor * 0.7
    if job.cls.serve:
        load = 0.55 + 0.3 * math.sin(ts / 3600.0 * math.pi / 6) + gpu.rng.gauss(0, 0.08)
        load = min(0.98, max(0.05, load))
        return load, load * 0.9, job.cls.tensor
    data, comm = shares(job, since)
    compute = 1.0 - data - comm
    if "straggler" in gpu.faults and since >= 0:  # the slow node computes the whole step, waits the least
        comm = job.cls.comm_share
        compute = 1.0 - data - comm
    if "pipeline-parallel" in faults:
        stage = _stage(gpu)
        compute = STAGE_COMPUTE[stage % len(STAGE_COMPUTE)]
        return compute + (1.0 - data - compute) * 0.5, compute, STAGE_TENSOR[stage % len(STAGE_TENSOR)]
    if "tensor-fallback" in faults and since >= 0:
        return min(1.0, compute + comm * 0.9), compute, job.cls.tensor * TENSOR_LEFT
    return min(1.0, compute + comm * 0.9), compute, job.cls.tensor


def _stage(gpu: GpuSim) -> int:
    """The node's place in the multi-node job (its ranks are the job's GPUs, node by node)."""
    return gpu.rank // gpu.node.sim.per_node


def _in_checkpoint(gpu: GpuSim, job: Job, ts: float, since: float) -> bool:
    """The GPU is writing its job's checkpoint; ``multinode-checkpoints``: each node enters (and
    leaves) it ``CKPT_STAGGER_S`` after the node before it."""
    if "multinode-checkpoints" not in job_faults(job) or since < 0:
        return job.ckpt_until is not None
    lag = CKPT_STAGGER_S * _stage(gpu)
    if job.ckpt_until is not None:
        return ts >= job.ckpt_until - CKPT_LEN_S + lag
    return ts < job.last_ckpt + lag


def checkpoints(job: Job, since: float) -> tuple[float, float]:
    """(every, how long) of the job's checkpoints now."""
    if since >= 0 and "multinode-checkpoints" in job_faults(job):
        return CKPT_EVERY_S, CKPT_LEN_S
    return job.cls.ckpt_every_s, job.cls.ckpt_len_s


def _unused(gpu: GpuSim, since: float) -> bool:
    """``gpus-unused``: from onset its job works on its first 2 GPUs only."""
    return "gpus-unused" in gpu.faults and since >= 0 and gpu.rank >= 2


def job_faults(job: Job) -> set[str]:
    out: set[str] = set()
    for g in job.gpus:
        out |= g.faults
    return out


def shares(job: Job, since: float) -> tuple[float, float]:
    """(data-loader wait share, communication share) of a training step now."""
    faults = job_faults(job) if since >= 0 else set()
    data = 0.55 if "dataloader-starvation" in faults else job.cls.data_share
    comm = 0.45 if "comm-bound" in faults else job.cls.comm_share
    if "straggler" in faults:  # the others wait for the slow node: the step takes STRAGGLER_SLOW x
        comm = 1.0 - data - (1.0 - job.cls.data_share - job.cls.comm_share) / STRAGGLER_SLOW
    if "straggler-pcie" in faults:  # every rank waits in the collectives for the slow link
        comm = 1.0 - data - (1.0 - job.cls.data_share - job.cls.comm_share) / PCIE_SLOW
    return data, comm


# --------------------------------------------------------------------------- nodes


@dataclass(slots=True)
class NodeSim:
    sim: Simulator
    name: str
    boot_id: str
    driver: str
    gpus: list[GpuSim] = field(default_factory=list)
    seq: int = 0
    event_seq: int = 0

    def event(self, ts: float, kind: EventKind, gpu: GpuSim, *, code: int | None = None,
              count: int = 1, message: str = "", catalogue=None) -> GpuEvent:
        ev = GpuEvent(ts=ts + 0.5 * self.sim.tick_s, node=self.name, seq=self.event_seq,
                      boot_id=self.boot_id, kind=kind, source="sim", gpu_index=gpu.index,
                      gpu_uuid=gpu.uuid, pci_bus_id=bus_id(gpu.index), code=code, count=count,
                      message=message, catalogue=catalogue, simulated=True)
        self.event_seq += 1
        return ev

    def xid(self, ts: float, gpu: GpuSim, code: int, text: str) -> GpuEvent:
        pid = gpu.job.pids[gpu.rank] if gpu.job is not None and not gpu.job.ended else "'<unknown>'"
        line = f"NVRM: Xid (PCI:{bus_id(gpu.index)[:-2]}): {code}, pid={pid}, {text}"
        return self.event(ts, EventKind.XID, gpu, code=code, message=line, catalogue=lookup(code))

    def snapshot(self, ts: float, events: list[GpuEvent]) -> NodeSnapshot:
        samples, procs = [], []
        dt = self.sim.tick_s
        for g in self.gpus:
            s, p = g.sample(self.sim, ts, dt, events)
            samples.append(s)
            procs.extend(p)
        snap = NodeSnapshot.of(ts=ts, node=self.name, seq=self.seq, boot_id=self.boot_id,
                            agent_version=AGENT_VERSION, driver_version=self.driver,
                            cuda_version=CUDA, interval_s=dt, simulated=True, gpus=samples, processes=procs)
        self.seq += 1
        return snap


# --------------------------------------------------------------------------- simulator


SIM_NODE_PREFIX = "sim-"
"""Simulated nodes are named so that no one takes them for real machines (issue #18, defect 6)."""


def sim_node(n: int) -> str:
    """The name of simulated node ``n``: ``sim-node-00``, ``sim-node-01``, …"""
    return f"{SIM_NODE_PREFIX}node-{n:02d}"


def tick_for(span: float | None, live_tick: float = 1.0) -> float:
    """The simulated tick, the same for ``gpuwarden run`` and ``gpuwarden agent``: ``live_tick``
    in real time (no span); a span run as fast as possible gets coarser ticks, which keep a
    7-day run to seconds: 5 s up to 6 h, 10 s up to 2 days, 30 s beyond."""
    if not span:
        return live_tick
    if span > 2 * 86400:
        return 30.0
    if span > 6 * 3600:
        return 10.0
    return 5.0


class Simulator:
    """N nodes × M GPUs running scenario(s); ``step()`` is one tick of event time."""

    def __init__(self, scenario: str | list[str], *, nodes: int = 1, gpus: int = 8, seed: int = 0,
                 start_ts: float, tick_s: float = 1.0, gpu_model: str = "H200",
                 onset_s: float = DEFAULT_ONSET_S) -> None:
        names = [scenario] if isinstance(scenario, str) else list(scenario)
        for n in names:
            if n not in SCENARIOS:
                raise ValueError(f"unknown scenario {n!r}; expected one of {', '.join(SCENARIOS)}")
        if nodes < 1 or gpus < 1 or tick_s <= 0:
            raise ValueError("nodes and gpus must be at least 1 and tick_s positive")
        self.scenarios = names
        self.seed, self.tick_s = seed, float(tick_s)
        self.start_ts = self.ts = float(start_ts)
        self.onset_ts = self.start_ts + onset_s
        spec = model(gpu_model)
        skew = "mixed" in names and nodes >= 2
        self.nodes: list[NodeSim] = []
        for n in range(nodes):
            name, base = sim_node(n), f"node-{n:02d}"  # the random streams keep their old seeds
            rng = random.Random(f"{seed}/{base}")
            driver = SKEWED_DRIVER if skew and n == nodes - 1 else DRIVER
            node = NodeSim(self, name, str(uuid.UUID(int=rng.getrandbits(128))), driver)
            for i in range(gpus):
                grng = random.Random(f"{seed}/{base}/{i}")
                node.gpus.append(GpuSim(node, i, spec, grng, f"GPU-{uuid.UUID(int=grng.getrandbits(128))}"))
            self.nodes.append(node)
        self._rng = random.Random(f"{seed}/jobs")
        self.jobs: list[Job] = []
        self._next_slurm = 41000 + self._rng.randint(0, 5000)
        self.per_node = max(1, gpus // 2)  # the multi-node job's GPUs per node
        self.placement = self._place_faults(names)
        self._start_jobs()
        self.serving = self._place_services(names)
        self._serving_seq = {node.name: 0 for node in self.nodes}
        wanted = {n for n in names if n in CLUSTER_SCENARIOS} | (set(CLUSTER_SCENARIOS) if "mixed" in names else set())
        if "gpus-unused" in wanted:  # a node of its own: the other faults keep their GPUs
            name, base = sim_node(nodes), f"node-{nodes:02d}"  # the random streams keep their old seeds
            rng = random.Random(f"{seed}/{base}")
            node = NodeSim(self, name, str(uuid.UUID(int=rng.getrandbits(128))), DRIVER)
            for i in range(gpus):
                grng = random.Random(f"{seed}/{base}/{i}")
                node.gpus.append(GpuSim(node, i, spec, grng, f"GPU-{uuid.UUID(int=grng.getrandbits(128))}",
                                        faults={"gpus-unused"}))
            self.nodes.append(node)
            self._launch(EVAL, node.gpus, self.start_ts)
        self.cluster = ClusterSim(self, wanted) if wanted else None

    # ------------------------------------------------------------------ layout

    def bus_ids(self) -> dict[int, str]:
        """GPU index → the simulated PCI bus id (the same on every simulated node)."""
        return {i: bus_id(i) for i in range(len(self.nodes[0].gpus))}

    def dcgm_fields(self, node: str, sample: GpuSample) -> dict[str, float]:
        """dcgm-exporter's fields that only /metrics serves, for a simulated GPU: the graphics
        engine as busy as the GPU's utilisation, no video encode or decode, PCIe traffic in
        proportion to it (a training step's host-to-device input and its outputs back: up to
        4 GB/s in, 1 GB/s out), NVLink traffic too where the GPU has links (up to 200,000 MiB/s on
        18 links: a busy all-reduce, well under NVLink 4's 900 GB/s), and a bare-metal vGPU
        licence (0, as DCGM reads it where vGPU licensing is unsupported). None of it without a
        utilisation reading (a lost GPU)."""
        if sample.util_gpu is None:
            return {}
        busy = sample.util_gpu / 100
        out = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(busy, 4), "DCGM_FI_DEV_ENC_UTIL": 0.0,
               "DCGM_FI_DEV_DEC_UTIL": 0.0, "DCGM_FI_PROF_PCIE_RX_BYTES": round(busy * 4e9),
               "DCGM_FI_PROF_PCIE_TX_BYTES": round(busy * 1e9), "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0.0}
        if sample.nvlink_up:
            out["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] = float(int(busy * 200_000 * sample.nvlink_up / 18))
        return out

    def _place_faults(self, names: list[str]) -> dict[str, tuple[int, int]]:
        """Fault scenario -> (node, gpu); single-GPU slots first, spread over nodes."""
        faults = [f for n in names for f in (MIXED_FAULTS if n == "mixed" else [n]) if f in FAULTS]
        nodes, gpus = len(self.nodes), len(self.nodes[0].gpus)
        single = [(n, g) for g in range(self.per_node, gpus) for n in range(nodes)] or [(0, 0)]
        hw = [(n, g) for g in range(self.per_node - 1, -1, -1) for n in range(nodes)]
        used = {"single": 0, "hw": 0, "multi": 0, "node": 0}
        out: dict[str, tuple[int, int]] = {}
        for f in dict.fromkeys(faults):
            kind = SCENARIOS[f].placement
            slots = {"single": single, "hw": hw, "multi": [(0, 0)], "node": [(nodes - 1, 0)]}[kind]
            out[f] = slots[used[kind] % len(slots)]
            used[kind] += 1
            n, g = out[f]
            for gpu in self.nodes[n].gpus[g:self.per_node] if kind == "node" else [self.nodes[n].gpus[g]]:
                gpu.faults.add(f)
        return out

    def _place_services(self, names: list[str]) -> list[ServingSim]:
        """One simulated vLLM service per serving scenario, on the nodes in turn, attributed to
        the node's ``vllm-serve`` job (its pid and GPU) when there is one."""
        wanted = [n for name in names for n in (SERVING if name == "mixed" else [name])
                  if n in SERVING and (name != "mixed" or SCENARIOS[n].in_mixed)]
        out = []
        for i, scenario in enumerate(dict.fromkeys(wanted)):
            # serving-replicas: one replica on every node, the first one faulty
            nodes = self.nodes if scenario == "serving-replicas" else [self.nodes[i % len(self.nodes)]]
            for k, node in enumerate(nodes):
                job = next((g.job for g in node.gpus if g.job is not None and g.job.cls.serve), None)
                pid = job.pids[0] if job else 1000 + i
                gpus = [g.index for g in node.gpus if job is not None and g.job is job]
                out.append(ServingSim(scenario, node=node.name, boot_id=node.boot_id, seed=self.seed,
                                      start_ts=self.start_ts, pid=pid, gpus=gpus, faulty=k == 0))
        return out

    def _start_jobs(self) -> None:
        multi = [node.gpus[i] for node in self.nodes for i in range(self.per_node)]
        self._launch(LLAMA, multi, self.start_ts)
        for node in self.nodes:
            for i in range(self.per_node, len(node.gpus)):
                cls = SINGLE[(i - self.per_node) % len(SINGLE)]
                self._launch(cls, [node.gpus[i]], self.start_ts)

    def _launch(self, cls: TaskClass, gpus: list[GpuSim], ts: float) -> Job:
        rng = self._rng
        if cls.k8s:
            name = f"{cls.name}-{rng.getrandbits(32):08x}-{''.join(rng.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}"
            pod = (name, cls.project, str(uuid.UUID(int=rng.getrandbits(128))), f"{rng.getrandbits(256):064x}")
            job = Job(cls, name, ts, gpus, None, pod, [])
        else:
            self._next_slurm += 1 + rng.randint(0, 40)
            job = Job(cls, f"slurm-{self._next_slurm}", ts, gpus, str(self._next_slurm), None, [])
        job.pids = [rng.randint(10_000, 4_000_000) for _ in gpus]
        job.last_ckpt = ts
        for rank, g in enumerate(gpus):
            g.job, g.rank, g.mem_jitter_mib, g.leak_mib = job, rank, 0.0, 0.0
        self.jobs.append(job)
        return job

    def crash(self, gpu: GpuSim, ts: float, message: str) -> None:
        """The task on ``gpu`` dies with an error (its other GPUs are freed too)."""
        job = gpu.job
        if job is not None and not job.ended:
            self._end(job, ts, 1, message)

    @staticmethod
    def _end(job: Job, ts: float, code: int, message: str) -> None:
        job.ended, job.exit_pending, job.exit_code, job.exit_message = True, True, code, message
        job.start_ts = ts  # from now on: the restart gap

    # ------------------------------------------------------------------ ticking

    def step(self) -> list[Record]:
        """One tick for all nodes: snapshots, events and task metrics, sorted by ts."""
        ts, out = self.ts, []
        metrics: list[TaskMetric] = []
        for job in list(self.jobs):
            metrics.extend(self._progress(job, ts))
        for node in self.nodes:
            events: list[GpuEvent] = []
            out.append(node.snapshot(ts, events))
            out.extend(events)
        for job in list(self.jobs):
            metrics.extend(self._exits(job, ts))
        out.extend(metrics)
        for sim in self.serving:
            if sim.due(ts):
                rec = sim.scrape(ts, self._serving_seq[sim.node])
                if rec is not None:
                    self._serving_seq[sim.node] += 1
                    out.append(rec)
        if self.cluster is not None:
            out.extend(self.cluster.step(ts))
        out.sort(key=lambda r: r.ts)
        self.ts = ts + self.tick_s
        return out

    def run(self, duration_s: float) -> Iterator[Record]:
        end = self.ts + duration_s
        while self.ts < end - 1e-9:
            yield from self.step()

    def _metric(self, job: Job, ts: float, kind: TaskMetricKind, **fields) -> TaskMetric:
        g = job.gpus[0]
        return TaskMetric(ts=ts + 0.25 * self.tick_s, node=g.node.name, task=job.cls.name,
                          task_id=job.task_id, kind=kind, pid=job.pids[0], uid=job.cls.uid, simulated=True,
                          **fields)

    def _progress(self, job: Job, ts: float) -> list[TaskMetric]:
        """Advance a job by one tick; the task SDK records it would have sent."""
        if job.ended:
            return []
        cls, dt, since = job.cls, self.tick_s, ts - self.onset_ts
        faults = job_faults(job) if since >= 0 else set()
        if "idle-allocated" in faults or ts < job.start_ts:
            return []
        out: list[TaskMetric] = []
        rng = job.gpus[0].rng
        if cls.serve:
            if ts - job.last_rate_ts >= 10.0:
                job.last_rate_ts = ts
                load = 0.55 + 0.3 * math.sin(ts / 3600.0 * math.pi / 6)
                out.append(self._metric(job, ts, TaskMetricKind.TTFT, ttft_s=round(0.18 + 0.2 * load + abs(rng.gauss(0, 0.03)), 4)))
                out.append(self._metric(job, ts, TaskMetricKind.LATENCY, latency_s=round(1.2 + 1.5 * load + abs(rng.gauss(0, 0.1)), 4)))
                out.append(self._metric(job, ts, TaskMetricKind.THROUGHPUT, throughput=round(cls.per_step * load * 1.6, 1), throughput_unit=cls.unit))
            return out
        if job.ckpt_until is not None:
            if ts >= job.ckpt_until:
                job.ckpt_until, job.last_ckpt = None, ts
                out.append(self._metric(job, ts, TaskMetricKind.CHECKPOINT_END, step=job.reported_step))
            return out
        every, length = checkpoints(job, since)
        if ts - job.last_ckpt >= every:
            job.ckpt_until = ts + length
            out.append(self._metric(job, ts, TaskMetricKind.CHECKPOINT_BEGIN, step=job.reported_step))
            return out
        data, comm = shares(job, since)
        step_s = cls.step_s * job.slowdown() * (1.0 - cls.data_share - cls.comm_share) / (1.0 - data - comm)
        job.steps += dt / step_s
        if int(job.steps) > job.reported_step:
            job.reported_step = int(job.steps)
            st = step_s * (1.0 + rng.gauss(0, 0.03))
            out.append(self._metric(job, ts, TaskMetricKind.STEP, step=job.reported_step,
                                    step_time_s=round(st, 4), data_wait_s=round(st * data, 4),
                                    comm_s=round(st * comm, 4)))
        if ts - job.last_rate_ts >= 60.0:
            job.last_rate_ts = ts
            out.append(self._metric(job, ts, TaskMetricKind.THROUGHPUT, step=job.reported_step,
                                    throughput=round(cls.per_step / step_s, 1), throughput_unit=cls.unit))
        return out

    def _exits(self, job: Job, ts: float) -> list[TaskMetric]:
        """OOM from a leak, errors from hardware faults, normal ends; then restarts."""
        out: list[TaskMetric] = []
        if not job.ended:
            cap = 0.97 * job.gpus[0].spec.mem_total_mib
            if any(g.leak_mib and job.cls.mem_frac * g.spec.mem_total_mib + g.leak_mib >= cap for g in job.gpus):
                out.append(self._metric(job, ts, TaskMetricKind.OOM, message="CUDA out of memory"))
                self._end(job, ts, 1, "torch.OutOfMemoryError: CUDA out of memory")
            elif job.cls.run_s is not None and ts - job.start_ts >= job.cls.run_s:
                self._end(job, ts, 0, "finished")
            else:
                return out
        if job.exit_pending:
            job.exit_pending = False
            out.append(self._metric(job, ts, TaskMetricKind.EXIT, exit_code=job.exit_code,
                                    message=job.exit_message))
        # A GPU that fell off the bus or had a DBE stays empty (a scheduler would drain it); a job
        # that failed STRIKES times is not requeued again.
        if ts - job.start_ts >= RESTART_GAP_S and all(not g.lost and not g.dbe and g.strikes < STRIKES
                                                      for g in job.gpus):
            self.jobs.remove(job)
            for g in job.gpus:
                g.job = None
            self._launch(job.cls, job.gpus, ts)
        return out


def scenario_list() -> str:
    """One line per scenario for ``--list-scenarios``."""
    return "\n".join(f"{s.name:24} {s.description}" for s in SCENARIOS.values())
