"""The command backend (an operator's own drain/resume/status programs, run without a shell) and
the remediation section's checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuwarden.contract import RemediationOutcome
from gpuwarden.remediation.act import Remediator, Target, backend_for
from gpuwarden.remediation.config import RemediationConfig

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
