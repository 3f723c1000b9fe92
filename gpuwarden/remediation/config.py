"""``remediation:``: which backend, which rules offer a drain, which act on their own."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field, model_validator

from gpuwarden.config import CommonSettings, Section
from gpuwarden.units import Duration

#: Rules that offer a drain by default: hardware alerts whose XID catalogue action is a reset,
#: reboot or RMA (xid-hardware selects those actions), the GPU's own recovery action (XID 154),
#: faults that need a reset to clear, and a node that repeats faults.
DEFAULT_OFFERS = ("xid-hardware", "xid-node-repeated", "gpu-recovery-reset", "gpu-recovery-reboot",
                  "gpu-recovery-drain-p2p", "gpu-lost", "row-remap", "ecc-double-bit", "repeat-offender-gpu",
                  "repeat-offender-node")


class SlurmBackendConfig(Section):
    scontrol: str = Field(default="scontrol", description="the scontrol binary")
    conf: Path | None = Field(default=None, description="SLURM_CONF for scontrol (default: scontrol's own)")


class KubernetesBackendConfig(Section):
    kubeconfig: Path | None = Field(default=None, description="in-cluster config, else the default kubeconfig, when unset")
    taint_key: str = Field(default="gpuwarden.io/remediation", description="the taint put with the cordon")
    taint_effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class CommandBackendConfig(Section):
    """argv lists; ``{node}`` and ``{reason}`` are replaced (one argument each, never a shell)."""

    drain: list[str] = Field(default_factory=list)
    resume: list[str] = Field(default_factory=list)
    status: list[str] = Field(default_factory=list,
                              description="prints 'drained' or 'available' (optional: without it every "
                                          "drain and resume is run)")


class RemediationConfig(Section):
    backend: Literal["off", "slurm", "kubernetes", "command"] = Field(
        default="off", description="off: alerts offer nothing and 'gpuwarden act' refuses")
    offer: list[str] = Field(default_factory=lambda: list(DEFAULT_OFFERS),
                             description="rules whose firing alerts offer 'drain'")
    auto: list[str] = Field(default_factory=list,
                            description="rules drained without a person's confirmation (off: empty)")
    timeout: Duration = Field(default=30.0, gt=0, description="one scheduler command or API call")
    slurm: SlurmBackendConfig = Field(default_factory=SlurmBackendConfig)
    kubernetes: KubernetesBackendConfig = Field(default_factory=KubernetesBackendConfig)
    command: CommandBackendConfig = Field(default_factory=CommandBackendConfig)

    @model_validator(mode="after")
    def _auto_is_offered(self) -> RemediationConfig:
        missing = [r for r in self.auto if r not in self.offer]
        if missing:
            raise ValueError(f"auto names rules that offer no drain ({', '.join(missing)}): add them to offer")
        if self.backend == "command" and not (self.command.drain and self.command.resume):
            raise ValueError("backend command needs command.drain and command.resume (argv lists)")
        return self


class RemediationSettings(CommonSettings, Protocol):
    remediation: RemediationConfig
