"""Fixtures shared by the notifier tests: simulated time and a spool on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwarden.spool import Spool
from tests.fakes.clock import SimClock


@pytest.fixture
def clock() -> SimClock:
    return SimClock()


@pytest.fixture
def spool(tmp_path: Path) -> Iterator[Spool]:
    with Spool(tmp_path / "spool.db") as s:
        yield s
