"""docker-compose.yml is a deployment people will run: check it hangs together."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

from gpuwarden.app.cli import build_parser
from gpuwarden.app.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_and_their_commands_exist():
    services = COMPOSE["services"]
    assert set(services) == {"kafka", "kafka-users", "agent", "streams", "notify"}
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
    assert COMPOSE["services"]["kafka-users"]["image"] == kafka["image"]


def _listeners(value: str) -> dict[str, int]:
    return {u.split("://")[0]: int(u.rsplit(":", 1)[1]) for u in value.split(",")}


def test_only_a_sasl_listener_can_be_opened_to_other_hosts():
    """GPUWARDEN_KAFKA_BIND opens Kafka to other hosts: only the REMOTE listener follows it, and
    REMOTE is SASL (SCRAM-SHA-256, a JAAS entry of its own); the listener without a login is
    published on 127.0.0.1 only, whatever the variables say."""
    kafka = COMPOSE["services"]["kafka"]
    env = kafka["environment"]
    listeners = _listeners(env["KAFKA_LISTENERS"])
    protocols = dict(x.split(":") for x in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    published = {}
    for mapping in kafka["ports"]:
        host, host_port, container_port = mapping.rsplit(":", 2)
        published[int(container_port)] = host
    by_port = {port: name for name, port in listeners.items()}
    for port, host in published.items():
        name = by_port[port]
        if host != "127.0.0.1":  # may be bound elsewhere
            assert "GPUWARDEN_KAFKA_BIND" in host and protocols[name].startswith("SASL_"), (name, host)
    assert {by_port[p] for p, h in published.items() if "GPUWARDEN_KAFKA_BIND" in h} == {"REMOTE"}
    assert env["KAFKA_SASL_ENABLED_MECHANISMS"] == "SCRAM-SHA-256"
    # the image writes KAFKA_A_B___C as a.b-c: listener.name.remote.scram-sha-256.sasl.jaas.config
    jaas = {k: v for k, v in env.items() if k.startswith("KAFKA_LISTENER_NAME_REMOTE_")}
    assert jaas == {"KAFKA_LISTENER_NAME_REMOTE_SCRAM___SHA___256_SASL_JAAS_CONFIG":
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"}
    assert "REMOTE://${GPUWARDEN_KAFKA_HOST:-localhost}:19094" in env["KAFKA_ADVERTISED_LISTENERS"]


def test_the_remote_user_s_password_comes_from_the_env_file_and_stays_off_command_lines():
    users = COMPOSE["services"]["kafka-users"]
    script = users["command"][0]
    assert users["env_file"][0]["path"] == "deploy/secrets.env"
    assert "--add-config-file" in script and "--entity-name gpuwarden" in script and "umask 077" in script
    assert "--add-config " not in script  # a password in argv is visible to every process
    assert users["depends_on"] == {"kafka": {"condition": "service_healthy"}}
    example = (ROOT / "deploy" / "secrets.env.example").read_text().splitlines()
    assert "KAFKA_PASSWORD=" in example


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


SCHEMA = ROOT / "tests" / "fixtures" / "compose-spec" / "compose-spec.json"  # vendored, see its README.md


def _schema_errors(doc: dict) -> list[str]:
    import jsonschema

    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc))


def test_docker_compose_config():
    """``docker compose config`` where the CLI is installed; else the compose-spec JSON schema."""
    if _has_compose():
        r = subprocess.run(["docker", "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
                           capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stderr
    assert _schema_errors(COMPOSE) == []


def test_the_schema_check_catches_a_misspelt_key():
    broken = {**COMPOSE, "services": {**COMPOSE["services"], "notify": {**COMPOSE["services"]["notify"],
                                                                        "helthcheck": {}}}}
    assert _schema_errors(broken) == ["services/notify: 'helthcheck' does not match any of the regexes: '^x-'"]


def test_every_gpuwarden_service_has_a_healthcheck_on_its_metrics_port():
    settings = load_settings(ROOT / "deploy" / "gpuwarden.yaml")
    ports = {"agent": settings.agent.metrics_port, "streams": settings.engine.metrics_port,
             "notify": settings.notify.metrics_port}
    for name, port in ports.items():
        service = COMPOSE["services"][name]
        # /-/ready: doing its job (publishing, inputs moving, a route that answers), not only serving
        assert f"127.0.0.1:{port}/-/ready" in " ".join(service["healthcheck"]["test"])
        assert service["ports"] == [f"127.0.0.1:{port}:{port}"]


def test_the_image_copies_every_installed_folder():
    import tomllib

    folders = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values())
    copied = {line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")}
    missing = {f for f in folders if not any(f == c or f.startswith(c + "/") for c in copied)}
    assert not missing, missing  # a room under gpuwarden/ (remediation) comes with gpuwarden


def test_the_secrets_file_feeds_the_shipped_receivers():
    """Issue #21: the six variables of deploy/secrets.env.example were referenced nowhere."""
    names = {line.split("=")[0] for line in (ROOT / "deploy" / "secrets.env.example").read_text().splitlines()
             if line and not line.startswith("#")}
    settings = load_settings(ROOT / "deploy" / "gpuwarden.yaml")
    used: set[str] = set()
    for r in settings.notify.receivers:
        for section in r.model_dump(exclude_none=True).values():
            if isinstance(section, dict):  # a channel section: its secret references
                used |= {v["env"] for v in section.values() if isinstance(v, dict) and "env" in v}
    assert "KAFKA_PASSWORD" in COMPOSE["services"]["kafka-users"]["command"][0]  # the REMOTE listener's user
    names.discard("KAFKA_PASSWORD")
    assert names and names <= used, names - used


def test_no_service_runs_as_root_but_the_agent_and_kafka_is_reachable_by_setting():
    dockerfile = (ROOT / "Dockerfile").read_text().splitlines()
    assert "USER gpuwarden" in dockerfile
    services = COMPOSE["services"]
    assert services["agent"]["user"] == "0:0" and all("user" not in services[s] for s in ("streams", "notify"))
    kafka = services["kafka"]
    assert "${GPUWARDEN_KAFKA_HOST:-localhost}" in kafka["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert kafka["ports"] == ["127.0.0.1:19092:19092", "${GPUWARDEN_KAFKA_BIND:-127.0.0.1}:19094:19094"]
    assert "healthcheck" in services["agent"] and "9400" in " ".join(services["agent"]["healthcheck"]["test"])
