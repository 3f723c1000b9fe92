"""``gpuwarden act`` against the real Slurm of scripts/slurm-local (nodes gn1 and gn2): the node
shows DRAIN with gpuwarden's reason, then IDLE after ``resume``; a second drain changes nothing;
a node an operator drained keeps its reason and is not resumed by gpuwarden; a resolved or
simulated alert drains nothing; an unreachable controller is a failure that says so; the
operator's auto policy drains on its own; ``gpuwarden export`` carries the audit records."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest

from gpuwarden.app.cli import main
from gpuwarden.contract import AlertState, RemediationOutcome, Topics
from gpuwarden.remediation.act import Remediator, SpoolAudit, audit_trail
from gpuwarden.remediation.backends import SlurmBackend, parse_scontrol_node
from gpuwarden.remediation.config import RemediationConfig
from gpuwarden.spool import Spool
from tests.remediation.support import alert, config, node_state, settled, spool_alerts
from tests.slurm_support import LocalSlurm

pytestmark = pytest.mark.slurm


def _records(tmp_path: Path) -> list:
    with Spool(tmp_path / "spool.db") as spool:
        return list(audit_trail(spool, Topics()))


def test_drain_then_resume_through_the_cli(clean: LocalSlurm, tmp_path: Path, capsys) -> None:
    a = alert("gn1")
    spool_alerts(tmp_path / "spool.db", a)
    cfg = str(config(tmp_path, backend="slurm", slurm={"conf": clean.conf}))

    assert main(["act", a.fingerprint[:12], "drain", "--config", cfg, "--by", "alice"]) == 0
    state, reason = node_state(clean, "gn1")
    assert "DRAIN" in state.split("+") or state.startswith("DRAIN"), state
    assert reason == f"gpuwarden: xid-hardware {a.fingerprint}"
    assert "drain gn1 (slurm): done by alice" in capsys.readouterr().out

    assert main(["act", a.fingerprint, "drain", "--config", cfg, "--by", "bob"]) == 0  # idempotent
    assert "already drained by gpuwarden" in capsys.readouterr().out
    assert node_state(clean, "gn1")[1] == f"gpuwarden: xid-hardware {a.fingerprint}"

    assert main(["act", a.fingerprint, "resume", "--config", cfg, "--by", "alice"]) == 0
    assert settled(clean, "gn1") == ("IDLE", "")
    assert main(["act", a.fingerprint, "resume", "--config", cfg]) == 0  # nothing left to undo
    assert "is not drained" in capsys.readouterr().out

    recs = _records(tmp_path)
    assert [(r.action, r.outcome, r.by) for r in recs] == [
        ("drain", RemediationOutcome.DONE, "alice"), ("drain", RemediationOutcome.ALREADY, "bob"),
        ("resume", RemediationOutcome.DONE, "alice"), ("resume", RemediationOutcome.ALREADY, recs[-1].by)]
    assert recs[0].reason == f"gpuwarden: xid-hardware {a.fingerprint}" and "DRAIN" in recs[0].detail

    out = tmp_path / "history.tar"
    assert main(["export", "--config", cfg, "--out", str(out)]) == 0
    with tarfile.open(out) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    assert manifest["counts"]["remediation"] == 4 and manifest["schemas"]["remediation/1"] == 4


def test_an_operators_drain_is_kept_and_not_resumed(clean: LocalSlurm, tmp_path: Path, capsys) -> None:
    clean.run("scontrol", "update", "nodename=gn2", "state=drain", "reason=PSU swap ticket 4411")
    a = alert("gn2")
    spool_alerts(tmp_path / "spool.db", a)
    cfg = str(config(tmp_path, backend="slurm", slurm={"conf": clean.conf}))
    assert main(["act", a.fingerprint, "drain", "--config", cfg]) == 0
    assert "already drained by someone else" in capsys.readouterr().out
    assert main(["act", a.fingerprint, "resume", "--config", cfg]) == 1
    assert "drained by someone else (PSU swap ticket 4411)" in capsys.readouterr().err
    assert node_state(clean, "gn2")[1] == "PSU swap ticket 4411"


def test_resolved_and_simulated_alerts_drain_nothing(clean: LocalSlurm, tmp_path: Path, capsys) -> None:
    gone = alert("gn1", fingerprint="resolved-fp")
    sim = alert("gn1", fingerprint="simulated-fp", simulated=True)
    spool_alerts(tmp_path / "spool.db", gone, gone.model_copy(update={"state": AlertState.RESOLVED}), sim)
    cfg = str(config(tmp_path, backend="slurm", slurm={"conf": clean.conf}))
    assert main(["act", "resolved-fp", "drain", "--config", cfg]) == 1
    assert "the alert has resolved" in capsys.readouterr().err
    assert main(["act", "simulated-fp", "drain", "--config", cfg]) == 1
    assert "simulated alert" in capsys.readouterr().err
    assert node_state(clean, "gn1") == ("IDLE", "")
    assert [r.outcome for r in _records(tmp_path)] == [RemediationOutcome.REFUSED] * 2


def test_an_unreachable_controller_fails_and_changes_nothing(clean: LocalSlurm, tmp_path: Path, capsys) -> None:
    text = Path(clean.conf).read_text()
    dead = tmp_path / "slurm.conf"  # the same cluster, its controller's port one nothing listens on
    dead.write_text(re.sub(r"SlurmctldPort=\d+", "SlurmctldPort=9", text) + "\nMessageTimeout=2\n")
    a = alert("gn1")
    spool_alerts(tmp_path / "spool.db", a)
    cfg = str(config(tmp_path, backend="slurm", slurm={"conf": str(dead)}))
    assert main(["act", a.fingerprint, "drain", "--config", cfg]) == 1
    err = capsys.readouterr().err
    assert "failed" in err and "scontrol show node: exit 1" in err
    assert node_state(clean, "gn1") == ("IDLE", "")
    assert [r.outcome for r in _records(tmp_path)] == [RemediationOutcome.FAILED]


def test_the_auto_policy_drains_only_the_rules_the_operator_named(clean: LocalSlurm, tmp_path: Path) -> None:
    cfg = RemediationConfig(backend="slurm", auto=["xid-node-repeated"])
    with Spool(tmp_path / "spool.db") as spool:
        r = Remediator(SlurmBackend(conf=clean.conf), cfg, SpoolAudit(spool, Topics()))
        assert r.on_transition(alert("gn2", "xid-hardware")) is None  # offered, not auto: waits for a person
        assert r.on_transition(alert("gn2", "xid-node-repeated", simulated=True)) is None
        assert node_state(clean, "gn2") == ("IDLE", "")
        rec = r.on_transition(alert("gn2", "xid-node-repeated"))
        assert rec is not None and rec.outcome is RemediationOutcome.DONE and rec.by == "auto:xid-node-repeated"
        assert node_state(clean, "gn2")[1] == f"gpuwarden: xid-node-repeated {rec.fingerprint}"
        resolved = alert("gn2", "xid-node-repeated", state=AlertState.RESOLVED)
        assert r.on_transition(resolved) is None  # the policy drains; a person resumes
    off = Remediator(SlurmBackend(conf=clean.conf), RemediationConfig(backend="slurm"), lambda rec: None)
    assert off.on_transition(alert("gn1", "xid-node-repeated")) is None  # auto is off unless turned on


def test_scontrol_node_lines_parse_as_slurm_prints_them() -> None:
    line = ("NodeName=gn1 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 "
            "Partitions=gpu Reason=gpuwarden: xid-hardware abc123 [root@2026-12-06T07:10:02]")
    s = parse_scontrol_node(line)
    assert s.drained and s.ours and s.reason == "gpuwarden: xid-hardware abc123" and s.state == "IDLE+DRAIN"
    assert not parse_scontrol_node("NodeName=gn2 State=MIXED Partitions=gpu").drained
