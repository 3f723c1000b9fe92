"""The composed Settings satisfies every room's Protocol (no type checker runs in CI, so this does)."""

from __future__ import annotations

import typing
from typing import Literal

import pytest

from gpuwarden.app.settings import ROOT_SECTIONS, Settings
from gpuwarden.config import CommonSettings
from gpuwarden.history.config import HistorySettings
from gpuwarden.notifiers.config import NotifierSettings
from gpuwarden.producers.config import AgentSettings, SchedulerSettings
from gpuwarden.remediation.config import RemediationSettings
from gpuwarden.streams.config import StreamsSettings


@pytest.mark.parametrize("protocol", [CommonSettings, AgentSettings, SchedulerSettings, StreamsSettings, NotifierSettings,
                                      HistorySettings])
def test_settings_has_every_section_a_room_reads_with_its_type(protocol):
    wanted = typing.get_type_hints(protocol)
    fields = {name: f.annotation for name, f in Settings.model_fields.items()}
    assert wanted
    for name, kind in wanted.items():
        got = fields.get(name)
        assert got == kind or (kind is str and typing.get_origin(got) is Literal
                               and all(isinstance(v, str) for v in typing.get_args(got))), (name, got, kind)


def test_every_section_is_read_by_some_room():
    read = set()
    for protocol in (AgentSettings, SchedulerSettings, StreamsSettings, NotifierSettings, HistorySettings,
                     RemediationSettings):
        read |= set(typing.get_type_hints(protocol))
    assert read | ROOT_SECTIONS == set(Settings.model_fields)
