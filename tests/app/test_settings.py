"""The composed Settings satisfies every room's Protocol (no type checker runs in CI, so this does)."""

from __future__ import annotations

import typing

import pytest

from gpuwarden.app.settings import Settings
from gpuwarden.config import CommonSettings
from gpuwarden.history.config import HistorySettings
from gpuwarden.notifiers.config import NotifySettings
from gpuwarden.producers.config import AgentSettings
from gpuwarden.streams.config import StreamsSettings


@pytest.mark.parametrize("protocol", [CommonSettings, AgentSettings, StreamsSettings, NotifySettings,
                                      HistorySettings])
def test_settings_has_every_section_a_room_reads_with_its_type(protocol):
    wanted = typing.get_type_hints(protocol)
    fields = {name: f.annotation for name, f in Settings.model_fields.items()}
    assert wanted and {name: fields.get(name) for name in wanted} == wanted


def test_every_section_is_read_by_some_room():
    read = set()
    for protocol in (AgentSettings, StreamsSettings, NotifySettings, HistorySettings):
        read |= set(typing.get_type_hints(protocol))
    assert read == set(Settings.model_fields)
