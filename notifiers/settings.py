"""What the notifier reads of the composed settings: its own section and the foundation's shared ones.

The settings model is assembled from every room's section at load time, so it
has no static type of its own; this Protocol names the part that the
notifier's commands and :class:`~gpuwarden.notifiers.pipeline.Notifier` use.
"""

from __future__ import annotations

from typing import Protocol

from gpuwarden.config import KafkaConfig, LimitsConfig, SpoolConfig
from gpuwarden.notifiers.config import NotifyConfig


class NotifierSettings(Protocol):
    language: str
    notify: NotifyConfig
    kafka: KafkaConfig
    spool: SpoolConfig
    limits: LimitsConfig
