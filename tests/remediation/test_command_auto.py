"""The command backend (an operator's own drain/resume/status programs, run without a shell) and
the remediation section's checks; audit records through export and import."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuwarden.contract import RemediationOutcome, Topics
from gpuwarden.history.portable import HistoryFile, export_history, import_to_spool
from gpuwarden.remediation.act import Remediator, SpoolAudit, Target, audit_trail, backend_for
from gpuwarden.remediation.config import RemediationConfig
from gpuwarden.spool import Spool

#: A stand-in for a site's drain tooling: keeps each node's drain reason in a file of its own.
TOOL = '''import pathlib, sys
verb, node, *reason = sys.argv[1:]
state = pathlib.Path(sys.argv[0]).with_name(node + ".drained")
if verb == "drain":
    state.write_text(" ".join(reason))
elif verb == "resume":
    state.unlink(missing_ok=True)
else:
    print(f"drained {state.read_text()}" if state.exists() else "available")
'''


def _config(tmp: Path, status: bool = True, **kw: object) -> RemediationConfig:
    tool = tmp / "tool.py"
    tool.write_text(TOOL)
    run = [sys.executable, str(tool)]
    return RemediationConfig(backend="command", command={
        "drain": [*run, "drain", "{node}", "{reason}"], "resume": [*run, "resume", "{node}"],
        "status": [*run, "status", "{node}"] if status else []}, **kw)


def test_the_command_backend_drains_once_and_resumes(tmp_path: Path) -> None:
    records: list = []
    cfg = _config(tmp_path)
    r = Remediator(backend_for(cfg), cfg, records.append)
    t = Target("fp1", "row-remap", "gn7", firing=True)
    assert r.act(t, "drain", "frank").outcome is RemediationOutcome.DONE
    assert (tmp_path / "gn7.drained").read_text() == "gpuwarden: row-remap fp1"
    assert r.act(t, "drain", "frank").outcome is RemediationOutcome.ALREADY
    assert r.act(t, "resume", "frank").outcome is RemediationOutcome.DONE and not (tmp_path / "gn7.drained").exists()
    blind_cfg = _config(tmp_path, status=False)
    blind = Remediator(backend_for(blind_cfg), blind_cfg, records.append)
    assert blind.act(t, "drain", "frank").outcome is RemediationOutcome.DONE  # no status: it cannot tell, so it runs
    assert blind.act(t, "drain", "frank").outcome is RemediationOutcome.DONE


def test_auto_must_name_offered_rules_and_a_command_backend_needs_its_programs() -> None:
    with pytest.raises(ValidationError, match="auto names rules that offer no drain"):
        RemediationConfig(backend="slurm", auto=["mem-leak"])
    with pytest.raises(ValidationError, match="needs command.drain and command.resume"):
        RemediationConfig(backend="command")
    assert RemediationConfig().backend == "off" and RemediationConfig().auto == []  # off unless turned on


def test_audit_records_travel_through_export_and_import(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    with Spool(tmp_path / "a.db") as spool:
        r = Remediator(backend_for(cfg), cfg, SpoolAudit(spool, Topics()))
        t = Target("fp1", "row-remap", "gn7", firing=True)
        done = [r.act(t, "drain", "gina"), r.act(t, "resume", "gina")]
        export_history(spool, tmp_path / "h.tar")
    with HistoryFile(tmp_path / "h.tar") as hf, Spool(tmp_path / "b.db") as other:
        hf.verify()
        import_to_spool(hf, other)
        assert list(audit_trail(other, Topics())) == done
