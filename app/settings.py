"""Settings assembly: the rooms' sections composed into the one model a config file fills.

Only the composition root knows every section; each room reads its own through a
Protocol (``AgentSettings``, ``StreamsSettings``, ``NotifierSettings``, ``HistorySettings``)
that this model satisfies.
"""

from __future__ import annotations

import os

from pydantic import Field

from gpuwarden.app.webconfig import WebConfig
from gpuwarden.config import (
    KafkaConfig,
    Language,
    LimitsConfig,
    Section,
    SpoolConfig,
    read_config,
    validate,
)
from gpuwarden.history.config import AccountingConfig
from gpuwarden.notifiers.config import NotifyConfig
from gpuwarden.producers.config import AgentConfig, SchedulerConfig
from gpuwarden.remediation.config import RemediationConfig
from gpuwarden.streams.config import EngineConfig


#: Sections no room reads: the composition root's own (the web console reads several rooms).
ROOT_SECTIONS = frozenset({"web"})


class Settings(Section):
    site: str = "default"
    language: Language = "en"
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    spool: SpoolConfig = Field(default_factory=SpoolConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
    accounting: AccountingConfig = Field(default_factory=AccountingConfig)
    remediation: RemediationConfig = Field(default_factory=RemediationConfig)
    web: WebConfig = Field(default_factory=WebConfig)


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Load and validate settings; raises :class:`gpuwarden.config.ConfigError` on any problem."""
    source, data = read_config(path)
    return validate_settings(data, source)


def validate_settings(data: dict[str, object], source: str = "<config>") -> Settings:
    return validate(Settings, data, source)
