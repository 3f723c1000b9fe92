"""Shared pytest configuration."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest_plugins = ["tests.kafka_support", "tests.slurm_support", "tests.alertmanager_support"]


@pytest.fixture
def kafka_report(record_property) -> Callable[[str], None]:
    """Record a line about real broker traffic; shown in the run's summary ("Kafka traffic")."""
    return lambda line: record_property("kafka_traffic", line)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``frameworks`` tests last: ``make test`` builds their venv in the background meanwhile."""
    items.sort(key=lambda item: item.get_closest_marker("frameworks") is not None)


def pytest_terminal_summary(terminalreporter) -> None:
    lines = [
        value
        for report in terminalreporter.stats.get("passed", [])
        for key, value in getattr(report, "user_properties", [])
        if key == "kafka_traffic"
    ]
    if lines:
        terminalreporter.section("Kafka traffic (real broker)")
        for line in lines:
            terminalreporter.write_line(line)
