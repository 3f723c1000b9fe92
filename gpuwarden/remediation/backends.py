"""One small interface per scheduler: read a node's state, drain it, resume it.

Each backend answers :class:`NodeStatus` (drained or not, and the reason the scheduler keeps)
and raises :class:`BackendError` when the scheduler cannot be reached or refuses, so the
caller records a failure and changes nothing else. Drain reasons written by gpuwarden start
with :data:`REASON_PREFIX`, which is how ``resume`` tells its own drains from an operator's.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any, Protocol

REASON_PREFIX = "gpuwarden:"


class BackendError(Exception):
    """The scheduler could not be reached, or refused the change; the message says which."""


@dataclass(frozen=True, slots=True)
class NodeStatus:
    drained: bool | None
    """None: the backend cannot tell (a command backend without a status command)."""
    reason: str = ""
    state: str = ""
    """The scheduler's own words (Slurm's ``IDLE+DRAIN``), for the audit record."""

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


class Backend(Protocol):
    name: str

    def status(self, node: str) -> NodeStatus: ...

    def drain(self, node: str, reason: str) -> str:
        """Take ``node`` out of scheduling; what the scheduler answered (may be empty)."""
        ...

    def resume(self, node: str) -> str:
        """Put ``node`` back; what the scheduler answered."""
        ...


def _run(argv: list[str], timeout_s: float, env: dict[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **env} if env else None)
    except FileNotFoundError:
        raise BackendError(f"{argv[0]}: not found") from None
    except subprocess.TimeoutExpired:
        raise BackendError(f"{' '.join(argv[:3])}: no answer within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        raise BackendError(f"{' '.join(argv[:3])}: exit {proc.returncode}: {said[-1] if said else 'no message'}")
    return proc.stdout.strip()


# --------------------------------------------------------------------------- Slurm


def parse_scontrol_node(text: str) -> NodeStatus:
    """``scontrol show node -o NAME`` (one line of ``Key=Value``; ``Reason=`` runs to the end of
    the reason, which may hold spaces, and is followed by `` [user@time]``)."""
    state, reason = "", ""
    for field in text.split():
        if field.startswith("State="):
            state = field.removeprefix("State=")
            break
    if " Reason=" in text:
        reason = text.split(" Reason=", 1)[1]
        reason = reason.split(" [", 1)[0].strip()
    words = set(state.replace("+", " ").split())
    drained = bool(words & {"DRAIN", "DRAINED", "DRAINING"})
    return NodeStatus(drained=drained, reason=reason if drained else "", state=state)


@dataclass
class SlurmBackend:
    """``scontrol update nodename=N state=drain reason=...`` and ``state=resume``."""

    scontrol: str = "scontrol"
    conf: str | None = None
    timeout_s: float = 30.0
    name: str = "slurm"

    def _scontrol(self, *args: str) -> str:
        return _run([self.scontrol, *args], self.timeout_s, {"SLURM_CONF": self.conf} if self.conf else None)

    def status(self, node: str) -> NodeStatus:
        return parse_scontrol_node(self._scontrol("show", "node", "-o", node))

    def drain(self, node: str, reason: str) -> str:
        return self._scontrol("update", f"nodename={node}", "state=drain", f"reason={reason}")

    def resume(self, node: str) -> str:
        return self._scontrol("update", f"nodename={node}", "state=resume")


# --------------------------------------------------------------------------- Kubernetes


@dataclass
class KubernetesBackend:
    """Cordon (``spec.unschedulable: true``) plus a taint carrying the reason, by a JSON merge
    patch of the Node that also names the ``resourceVersion`` read, so a concurrent change
    makes the API server answer 409 instead of one writer losing the other's taints."""

    core: Any
    """A ``kubernetes.client.CoreV1Api``."""
    taint_key: str = "gpuwarden.io/remediation"
    taint_effect: str = "NoSchedule"
    timeout_s: float = 30.0
    name: str = "kubernetes"

    @classmethod
    def connect(cls, kubeconfig: str | None, **kw: Any) -> KubernetesBackend:
        from kubernetes import client, config  # the optional extra, imported only when used

        try:
            if kubeconfig is None:
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    config.load_kube_config()
            else:
                config.load_kube_config(config_file=kubeconfig)
        except Exception as e:  # noqa: BLE001 - the client raises several kinds; all mean "no API"
            raise BackendError(f"kubernetes: no configuration ({e})") from None
        return cls(client.CoreV1Api(), **kw)

    def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, _request_timeout=self.timeout_s, **kw)
        except Exception as e:  # noqa: BLE001 - ApiException, urllib3 errors: the API is unreachable or says no
            status = getattr(e, "status", None)
            raise BackendError(f"kubernetes: {getattr(e, 'reason', None) or e}"
                               + (f" (HTTP {status})" if status else "")) from None

    def _node(self, node: str) -> dict:
        raw = self._call(self.core.read_node, node)
        return self.core.api_client.sanitize_for_serialization(raw)

    def status(self, node: str) -> NodeStatus:
        doc = self._node(node)
        spec = doc.get("spec") or {}
        ours = [t for t in spec.get("taints") or [] if t.get("key") == self.taint_key]
        cordoned = bool(spec.get("unschedulable"))
        # Our taint key is the mark of our cordon (its value is the reason made a label value).
        reason = f"{REASON_PREFIX} {ours[0].get('value', '')}" if ours and cordoned else ""
        return NodeStatus(drained=cordoned, reason=reason, state="cordoned" if cordoned else "schedulable")

    def _patch(self, node: str, unschedulable: bool, taints: list[dict], version: str | None) -> str:
        body = {"metadata": {"resourceVersion": version} if version else {},
                "spec": {"unschedulable": unschedulable, "taints": taints}}
        self._call(self.core.patch_node, node, body, _content_type="application/merge-patch+json")
        return f"spec.unschedulable={str(unschedulable).lower()}, {len(taints)} taints"

    def drain(self, node: str, reason: str) -> str:
        doc = self._node(node)
        taints = [t for t in (doc.get("spec") or {}).get("taints") or [] if t.get("key") != self.taint_key]
        taints.append({"key": self.taint_key, "value": _label_value(reason), "effect": self.taint_effect})
        return self._patch(node, True, taints, (doc.get("metadata") or {}).get("resourceVersion"))

    def resume(self, node: str) -> str:
        doc = self._node(node)
        taints = [t for t in (doc.get("spec") or {}).get("taints") or [] if t.get("key") != self.taint_key]
        return self._patch(node, False, taints, (doc.get("metadata") or {}).get("resourceVersion"))


def _label_value(reason: str) -> str:
    """A taint value is a label value: 63 characters of [A-Za-z0-9._-], starting and ending
    alphanumeric; the full reason stays in the audit record."""
    kept = "".join(c if c.isalnum() or c in "._-" else "_" for c in reason)[:63]
    return kept.strip("._-") or "gpuwarden"


# --------------------------------------------------------------------------- an operator's command


@dataclass
class CommandBackend:
    """The operator's own argv for drain, resume and (optionally) status; ``{node}`` and
    ``{reason}`` are substituted per argument, nothing goes through a shell."""

    drain_argv: list[str]
    resume_argv: list[str]
    status_argv: list[str]
    timeout_s: float = 30.0
    name: str = "command"

    def _argv(self, argv: list[str], node: str, reason: str = "") -> list[str]:
        return [a.replace("{node}", node).replace("{reason}", reason) for a in argv]

    def status(self, node: str) -> NodeStatus:
        if not self.status_argv:
            return NodeStatus(drained=None)
        said = _run(self._argv(self.status_argv, node), self.timeout_s)
        first = said.split(None, 1)
        word = first[0].lower() if first else ""
        if word not in ("drained", "available"):
            raise BackendError(f"status command printed {said[:80]!r}, expected 'drained [reason]' or 'available'")
        return NodeStatus(drained=word == "drained", reason=first[1] if word == "drained" and len(first) > 1 else "",
                          state=word)

    def drain(self, node: str, reason: str) -> str:
        return _run(self._argv(self.drain_argv, node, reason), self.timeout_s)

    def resume(self, node: str) -> str:
        return _run(self._argv(self.resume_argv, node), self.timeout_s)
