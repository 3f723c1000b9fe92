"""XID 154 and the GPU's recovery action: read from NVML's field 230 where the binding offers it
(the fake NVML follows nvml.h: ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` = 230, an unsigned int of
``nvmlDeviceGpuRecoveryAction_t``; an unknown field fails in its own ``nvmlReturn``), else from the
kernel log's line (formats as NVIDIA drivers print them); carried in the event, put in place of
the XID catalogue's ``XID_154`` action, chosen by the gpu-recovery-* rules, and offering a drain."""

from __future__ import annotations

import pynvml

from gpuwarden.contract import EventKind, GpuSample, NodeSnapshot, decode, encode
from gpuwarden.producers.events import EV_RECOVERY, nvml_event, parse_kmsg_line, recovery_action_name
from gpuwarden.producers.nvml import NvmlCollector
from gpuwarden.remediation.act import Remediator
from gpuwarden.remediation.backends import SlurmBackend
from gpuwarden.remediation.config import RemediationConfig
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from tests.fakes.nvml import FakeGpu, FakeNvml

#: Lines as drivers that report XID 154 print them (seen in public bug reports and gpud's tests).
RESET = "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
REBOOT = "NVRM: Xid (PCI:0000:28:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"


def _collector(*gpus: FakeGpu, nv: FakeNvml | None = None) -> NvmlCollector:
    return NvmlCollector(nv or FakeNvml(list(gpus)), node="gn1", slow_in_thread=False)


def test_the_installed_binding_names_the_field_and_the_actions_as_the_fake_does() -> None:
    """The fake's numbers are nvml.h's, and nvidia-ml-py (the one installed) agrees."""
    assert pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION == FakeNvml([]).NVML_FI_DEV_GET_GPU_RECOVERY_ACTION == 230
    assert [recovery_action_name(v, pynvml) for v in range(5)] == [
        "NONE", "GPU_RESET", "NODE_REBOOT", "DRAIN_P2P", "DRAIN_AND_RESET"]


def test_kernel_log_lines_say_the_action_they_changed_to() -> None:
    reset, reboot = parse_kmsg_line(RESET, 1.0), parse_kmsg_line(REBOOT, 1.0)
    assert (reset.code, reset.recovery_action) == (154, "GPU_RESET")
    assert (reboot.code, reboot.recovery_action) == (154, "NODE_REBOOT")
    assert parse_kmsg_line("NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.", 1.0).recovery_action is None


def test_nvml_answers_first_and_the_event_carries_it_as_its_catalogue_action() -> None:
    c = _collector(FakeGpu(0), FakeGpu(1, recovery_action=4))
    c.events.bus_ids = {"0000:28:00.0": 1}
    rec = c.events.add(parse_kmsg_line(REBOOT, 10.0))  # the log says reboot; NVML, read now, says more
    assert rec.recovery_action == "DRAIN_AND_RESET" and rec.catalogue.action == "DRAIN_AND_RESET"
    assert rec.catalogue.code == 154 and rec.catalogue.meaning == "GPU recovery action changed"
    assert decode(encode(rec)) == rec
    assert c.nv.calls["nvmlDeviceGetFieldValues"] == 1


def test_without_the_field_the_log_line_decides_and_without_either_the_catalogue_stays() -> None:
    old_driver = _collector(FakeGpu(0))  # recovery_action None: field 230 answers NOT_SUPPORTED
    old_driver.events.bus_ids = {"0000:18:00.0": 0}
    assert old_driver.recovery_action(0) is None
    assert old_driver.events.add(parse_kmsg_line(RESET, 1.0)).recovery_action == "GPU_RESET"
    nv = FakeNvml([FakeGpu(0, recovery_action=2)])
    del nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION  # a binding older than the field
    old_binding = _collector(nv=nv)
    assert old_binding.recovery_action(0) is None and "nvmlDeviceGetFieldValues" not in nv.calls
    ev = old_binding.events.add(nvml_event(EV_RECOVERY, 0, 0, "GPU-0", 1.0))
    assert ev.code == 154 and ev.recovery_action is None and ev.catalogue.action == "XID_154"


def test_an_nvml_recovery_event_reads_the_action_and_the_rule_offers_a_drain() -> None:
    c = _collector(FakeGpu(0, recovery_action=1))
    ev = c.events.add(nvml_event(EV_RECOVERY, 0, 0, "GPU-0", 1_700_000_030.5))
    assert ev.kind is EventKind.XID and ev.recovery_action == "GPU_RESET"
    engine = Engine(config=EngineConfig())
    snap = lambda i: NodeSnapshot.of(node="gn1", seq=i, boot_id="b", agent_version="t", ts=1_700_000_000.0 + i,
                                     gpus=[GpuSample(index=0, uuid="GPU-0", util_gpu=90.0)])
    out = [t for i in range(30) for t in engine.process(snap(i))]
    out += engine.process(ev) + [t for i in range(30, 40) for t in engine.process(snap(i))]
    fired = [t for t in out if t.state.value == "firing"]
    assert [t.rule for t in fired] == ["gpu-recovery-reset"]  # not xid-hardware as well
    assert "GPU_RESET" in fired[0].summary and fired[0].labels["node"] == "gn1"
    r = Remediator(SlurmBackend(), RemediationConfig(backend="slurm"), lambda rec: None)  # offer() calls nothing
    offer = r.offer(fired[0])
    assert offer is not None and (offer.node, offer.action) == ("gn1", "drain")

