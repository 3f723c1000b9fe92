"""Settings: one YAML file validated by pydantic, secrets only from the environment or files.

Where the file comes from: ``--config``, else ``$GPUWARDEN_CONFIG``, else
``./gpuwarden.yaml``, else the built-in defaults (which work: standalone, simulated
GPUs where there is no NVML, a spool under ``./var``).

This module holds the primitives every layer uses: the section base model, secret
references, the shared sections (Kafka, spool, limits), reading the file and turning
validation errors into ``file: key.path: what was expected`` lines. Each room owns its
own section (``gpuwarden.producers.config``, ``gpuwarden.streams.config``, ...); the
composition root (``gpuwarden.app.settings``) assembles them into one model.
"""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from gpuwarden.contract import (
    DEFAULT_MAX_FUTURE_SKEW_S,
    DEFAULT_MAX_PAST_SKEW_S,
    DEFAULT_MAX_RECORD_BYTES,
    field_path,
)
from gpuwarden.units import Duration, Size


Language = Literal["en", "zh-CN"]


class ConfigError(Exception):
    """Bad configuration: names the file, the key path and what was expected."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


class Section(BaseModel):
    """Base of every config section. Unknown keys are collected (not rejected by pydantic) so
    :func:`validate` can name them all, each with the nearest known key."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_default=True)


class SecretRef(Section):
    """Where a secret lives: ``{env: NAME}`` or ``{file: /run/secrets/x}``, never inline."""

    env: str | None = None
    file: Path | None = None

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("expected exactly one of 'env' (variable name) or 'file' (path)")
        return self

    def resolve(self) -> SecretStr:
        """The secret's value; the error names the variable or file, never the value."""
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise ConfigError("environment", [f"secret variable {self.env} is not set"])
            return SecretStr(value)
        assert self.file is not None
        try:
            return SecretStr(self.file.read_text().strip())
        except OSError as e:
            raise ConfigError(str(self.file), [f"cannot read secret file ({e.strerror})"]) from None

    def warnings(self) -> list[str]:
        if self.file is not None and self.file.exists():
            mode = self.file.stat().st_mode
            if mode & (stat.S_IROTH | stat.S_IWOTH):
                return [f"secret file {self.file} is readable by other users (chmod 600 it)"]
        return []


class KafkaConfig(Section):
    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = ""
    client_id: str = "gpuwarden"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretRef | None = None
    ssl_cafile: Path | None = None
    partitions: int = Field(default=4, ge=1, le=1024)
    replication_factor: int = Field(default=1, ge=1, le=16)


class SpoolConfig(Section):
    path: Path = Path("var/spool.db")
    max_bytes: Size = 1 << 30
    max_age: Duration = 7 * 86400


class LimitsConfig(Section):
    max_record_bytes: Size = Field(default=DEFAULT_MAX_RECORD_BYTES, ge=1024, le=8 << 20)
    """Larger records are dead-lettered by the workers (a prefix kept) and never sent by agents;
    at most 8 MiB, so a dead letter holding a whole record fits the 16 MiB DLQ topics."""
    max_future_skew: Duration = DEFAULT_MAX_FUTURE_SKEW_S
    max_past_skew: Duration = Field(default=DEFAULT_MAX_PAST_SKEW_S, gt=0)
    """Records dated this far behind the worker's clock are dead-lettered, and the engine sets
    aside (counts ``implausible``) those this far behind their node's newest: a node booting
    with a reset clock must not raise or resolve alerts in 1970."""


class CommonSettings(Protocol):
    """The sections every room may read. A room's functions take its own Protocol (this plus its
    section) or just the section they need, never the composed model: the composition root
    (``gpuwarden.app.settings``) assembles that, and it satisfies every room's Protocol."""

    site: str
    language: Language
    kafka: KafkaConfig
    spool: SpoolConfig
    limits: LimitsConfig


M = TypeVar("M", bound=BaseModel)


def config_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """Resolve which file to load, or None for the built-in defaults."""
    if explicit:
        return Path(explicit)
    env = os.environ.get("GPUWARDEN_CONFIG")
    if env:
        return Path(env)
    local = Path("gpuwarden.yaml")
    return local if local.exists() else None


def read_config(path: str | os.PathLike[str] | None = None) -> tuple[str, dict[str, Any]]:
    """(source, mapping) of the file :func:`config_path` picks; ``("<defaults>", {})`` for none."""
    p = config_path(path)
    if p is None:
        return "<defaults>", {}
    source = str(p)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except OSError as e:
        raise ConfigError(source, [f"cannot read ({e.strerror})"]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(source, [f"{where}not valid YAML ({getattr(e, 'problem', e)})"]) from None
    if not isinstance(data, dict):
        raise ConfigError(source, ["expected a mapping of sections at the top level"])
    return source, data


def validate(model: type[M], data: dict[str, Any], source: str = "<config>") -> M:
    """``model`` from ``data``; raises :class:`ConfigError` naming ``source`` and each key path,
    unknown keys included (a typo such as ``notfiy:`` would otherwise send every alert nowhere)."""
    try:
        settings = model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(source, validation_problems(e)) from None
    unknown = unknown_keys(settings)
    if unknown:
        raise ConfigError(source, unknown)
    return settings


def unknown_keys(settings: BaseModel) -> list[str]:
    """``key.path: unknown key (did you mean 'x'?)`` for every key no section defines."""
    return _walk(settings)[0]


def validation_problems(err: ValidationError) -> list[str]:
    """``key.path: expected …`` for each error; the offending value is never echoed (it may be a secret)."""
    out = []
    for e in err.errors(include_url=False, include_input=False):
        out.append(f"{field_path(tuple(e['loc']))}: {_expected(e)}")
    return out


def _expected(e: dict[str, Any]) -> str:
    msg = e["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return msg[0].lower() + msg[1:] if msg else msg


def config_warnings(settings: BaseModel) -> list[str]:
    """World-readable secret files (unknown keys are errors: :func:`validate`)."""
    return _walk(settings)[1]


def _unknown(obj: BaseModel, key: str, loc: tuple[Any, ...]) -> str:
    fields = type(obj).model_fields
    known = [*fields, *(f.alias for f in fields.values() if f.alias)]
    near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    return f"{field_path((*loc, key))}: unknown key" + (f" (did you mean {near[0]!r}?)" if near else "")


def _walk(settings: BaseModel) -> tuple[list[str], list[str]]:
    """(unknown keys, world-readable secret files), each as ``key.path: what``."""
    unknown: list[str] = []
    found: list[str] = []

    def walk(obj: Any, loc: tuple[Any, ...]) -> None:
        if isinstance(obj, BaseModel):
            for k in (obj.model_extra or {}):
                unknown.append(_unknown(obj, k, loc))
            if isinstance(obj, SecretRef):
                found.extend(f"{field_path(loc)}: {w}" for w in obj.warnings())
            for name in type(obj).model_fields:
                walk(getattr(obj, name), (*loc, name))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, (*loc, i))
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, (*loc, k))

    walk(settings, ())
    return unknown, found
