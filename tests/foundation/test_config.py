"""Config: built-in defaults work; bad files fail at start naming file, key path and expectation."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpuwarden.app.settings import load_settings
from gpuwarden.config import ConfigError, SecretRef, config_warnings

GPUWARDEN = [sys.executable, "-m", "gpuwarden.app.cli"]


def test_defaults_load_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUWARDEN_CONFIG", raising=False)
    s = load_settings()
    assert s.kafka.bootstrap and s.spool.max_bytes > 0 and s.engine.observation_period == 14 * 86400


def test_file_resolution_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpuwarden.yaml").write_text("site: local\n")
    env_file = tmp_path / "env.yaml"
    env_file.write_text("site: from-env\n")
    explicit = tmp_path / "explicit.yaml"
    explicit.write_text("site: explicit\n")
    monkeypatch.delenv("GPUWARDEN_CONFIG", raising=False)
    assert load_settings().site == "local"
    monkeypatch.setenv("GPUWARDEN_CONFIG", str(env_file))
    assert load_settings().site == "from-env"
    assert load_settings(explicit).site == "explicit"


def test_units_parse(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("spool:\n  max_bytes: 512MiB\n  max_age: 3d\nengine:\n  observation_period: 36h\n")
    s = load_settings(f)
    assert s.spool.max_bytes == 512 << 20 and s.spool.max_age == 3 * 86400
    assert s.engine.observation_period == 36 * 3600


def test_wrong_type_two_levels_deep_cli_exit_2(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kafka:\n  sasl_password:\n    env: [not, a, name]\n")
    r = subprocess.run([*GPUWARDEN, "config", "check", str(f)], capture_output=True, text=True)
    assert r.returncode == 2
    assert f"{f}: kafka.sasl_password.env:" in r.stderr
    assert "valid string" in r.stderr


def test_several_problems_each_reported(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kafka:\n  partitions: many\nspool:\n  max_age: forever\n")
    with pytest.raises(ConfigError) as ei:
        load_settings(f)
    text = str(ei.value)
    assert "kafka.partitions:" in text and "integer" in text
    assert "spool.max_age:" in text and "duration" in text


def test_invalid_yaml_gives_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kafka:\n  bootstrap: [unclosed\n")
    with pytest.raises(ConfigError, match=r"line \d+"):
        load_settings(f)


def test_valid_file_cli_exit_0(tmp_path):
    f = tmp_path / "ok.yaml"
    f.write_text("kafka:\n  bootstrap: 127.0.0.1:19092\n")
    r = subprocess.run([*GPUWARDEN, "config", "check", str(f)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout


def test_secret_from_env_and_file_never_inline(tmp_path, monkeypatch):
    monkeypatch.setenv("GW_TEST_SECRET", "hunter2")
    assert SecretRef(env="GW_TEST_SECRET").resolve().get_secret_value() == "hunter2"
    p = tmp_path / "s"
    p.write_text("from-file\n")
    os.chmod(p, 0o600)
    assert SecretRef(file=p).resolve().get_secret_value() == "from-file"
    with pytest.raises(ValueError):
        SecretRef(env="A", file=p)
    monkeypatch.delenv("GW_TEST_SECRET")
    with pytest.raises(ConfigError) as ei:
        SecretRef(env="GW_TEST_SECRET").resolve()
    assert "GW_TEST_SECRET" in str(ei.value)


def test_secret_value_not_echoed_in_errors(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("kafka:\n  sasl_password: supersecretvalue\n")
    r = subprocess.run([*GPUWARDEN, "config", "check", str(f)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "kafka.sasl_password" in r.stderr
    assert "supersecretvalue" not in r.stderr + r.stdout


def test_unknown_keys_are_errors_naming_the_nearest_key(tmp_path):
    """Issue #18, defect 8: ``notfiy:`` or ``notify.recievers`` was a warning, ``config check``
    said ok, and every alert went nowhere."""
    f = tmp_path / "c.yaml"
    f.write_text("notfiy:\n  receivers: []\nnotify:\n  recievers: []\nkafka:\n  bootstrapp: x\n  zzzz: 1\n")
    with pytest.raises(ConfigError) as e:
        load_settings(f)
    assert e.value.problems == ["notfiy: unknown key (did you mean 'notify'?)",
                                "kafka.bootstrapp: unknown key (did you mean 'bootstrap'?)",
                                "kafka.zzzz: unknown key",
                                "notify.recievers: unknown key (did you mean 'receivers'?)"]
    r = subprocess.run([*GPUWARDEN, "config", "check", str(f)], capture_output=True, text=True)
    assert r.returncode == 2 and f"{f}: notfiy: unknown key (did you mean 'notify'?)" in r.stderr
    r = subprocess.run([*GPUWARDEN, "report", "--config", str(f), "usage"], capture_output=True, text=True)
    assert r.returncode == 2 and "notify.recievers" in r.stderr  # every command refuses it at start


def test_a_world_readable_secret_file_is_a_warning(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("x")
    os.chmod(secret, 0o644)
    f = tmp_path / "c.yaml"
    f.write_text(f"kafka:\n  sasl_password:\n    file: {secret}\n")
    assert any("readable by other users" in w for w in config_warnings(load_settings(f)))
    r = subprocess.run([*GPUWARDEN, "config", "check", str(f)], capture_output=True, text=True)
    assert r.returncode == 0 and "readable by other users" in r.stderr


def test_cli_has_every_subcommand_with_help():
    for cmd in ["run", "agent", "streams", "notify", "replay", "rules", "config", "silence",
                "ack", "report", "export", "import", "doctor", "test-notify"]:
        r = subprocess.run([*GPUWARDEN, cmd, "--help"], capture_output=True, text=True)
        assert r.returncode == 0 and "usage: gpuwarden" in r.stdout, (cmd, r.stderr)
    r = subprocess.run([*GPUWARDEN, "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("gpuwarden ")
