"""World-readable secret files are warned about, by ``config check`` and at start (unknown keys are
errors: tests/foundation/test_config.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def gpuwarden(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


def write_config(tmp_path: Path) -> tuple[Path, Path]:
    secret = tmp_path / "kafka-password"
    secret.write_text("hunter2-not-for-logs\n")
    secret.chmod(0o644)
    cfg = tmp_path / "gpuwarden.yaml"
    cfg.write_text(
        f"spool:\n  path: {tmp_path / 'spool.db'}\n"
        "kafka:\n  security_protocol: SASL_PLAINTEXT\n  sasl_mechanism: SCRAM-SHA-256\n  sasl_username: gw\n"
        f"  sasl_password: {{file: {secret}}}\n")
    return cfg, secret


def test_config_check_warns(tmp_path):
    cfg, secret = write_config(tmp_path)
    p = gpuwarden("config", "check", str(cfg))
    assert p.returncode == 0, p.stderr
    assert f"kafka.sasl_password: secret file {secret} is readable by other users (chmod 600 it)" in p.stderr
    assert "hunter2" not in p.stderr + p.stdout
    secret.chmod(0o600)
    assert "readable by other users" not in gpuwarden("config", "check", str(cfg)).stderr


def test_a_normal_start_logs_the_warnings(tmp_path):
    cfg, _ = write_config(tmp_path)
    p = gpuwarden("run", "--config", str(cfg), "--simulate", "healthy", "--nodes", "1", "--gpus", "1",
                  "--duration", "1m", "--json")
    assert p.returncode == 0, p.stderr
    assert "WARNING gpuwarden.config: kafka.sasl_password: secret file" in p.stderr
    assert "hunter2" not in p.stderr + p.stdout
