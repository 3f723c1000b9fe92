"""Helpers: run `gpuwarden run` in-process (same code as the CLI) on a throwaway spool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwarden.app.cli import main


@pytest.fixture
def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    def run(*argv: str, engine: dict | None = None) -> list[dict]:
        cfg = tmp_path / "gw.yaml"
        lines = [f"spool:\n  path: {tmp_path / 'spool.db'}\n", "engine:\n"]
        for k, v in (engine or {"observation_period": "1d"}).items():
            lines.append(f"  {k}: {v}\n")
        cfg.write_text("".join(lines))
        capsys.readouterr()
        assert main(["run", "--config", str(cfg), *argv, "--json"]) == 0
        out = capsys.readouterr().out
        return [json.loads(line) for line in out.splitlines()]
    return run
