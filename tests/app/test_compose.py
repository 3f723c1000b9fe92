"""docker-compose.yml is a deployment people will run: check it hangs together."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuwarden.app.cli import build_parser
from gpuwarden.app.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_and_their_commands_exist():
    services = COMPOSE["services"]
    assert set(services) == {"kafka", "agent", "streams", "notify"}
    parser = build_parser()
    for name in ("agent", "streams", "notify"):
        args = parser.parse_args(services[name]["command"])     # exits on an unknown command/flag
        assert args.command == name


def test_agent_can_see_host_processes_gpus_and_kmsg():
    agent = COMPOSE["services"]["agent"]
    assert agent["pid"] == "host" and agent["runtime"] == "nvidia"
    assert any(d.startswith("/dev/kmsg") for d in agent["devices"])


def test_kafka_is_kraft_with_a_persistent_volume():
    kafka = COMPOSE["services"]["kafka"]
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert any(v.startswith("kafka-data:") for v in kafka["volumes"])
    pinned = (ROOT / "scripts" / "kafka.version").read_text().strip()
    assert kafka["image"] == f"apache/kafka:{pinned}", "compose and tests should run the same Kafka"


def test_shipped_config_is_valid_and_secret_free():
    settings = load_settings(ROOT / "deploy" / "gpuwarden.yaml")
    assert settings.kafka.bootstrap == "kafka:9092"
    for line in (ROOT / "deploy" / "secrets.env.example").read_text().splitlines():
        if line and not line.startswith("#"):
            assert line.endswith("="), "the example env file must not carry values"


def _has_compose() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_compose(), reason="docker CLI with the compose plugin not installed")
def test_docker_compose_config():
    r = subprocess.run(["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_the_image_copies_every_installed_folder():
    import tomllib

    folders = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    copied = {line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")}
    assert folders <= copied, folders - copied
