"""Shared pytest configuration."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpuwarden import outage


@pytest.fixture(autouse=True)
def _fresh_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no Kafka trouble on record: the gate (gpuwarden/outage.py) is one per
    process, and a test's broker outage would otherwise hold back the next test's first line."""
    monkeypatch.setattr(outage, "OUTAGE", outage._Outage())

pytest_plugins = ["tests.kafka_support", "tests.slurm_support", "tests.alertmanager_support",
                  "tests.reliability_support"]


@pytest.fixture
def kafka_report(record_property) -> Callable[[str], None]:
    """Record a line about real broker traffic; shown in the run's summary ("Kafka traffic")."""
    return lambda line: record_property("kafka_traffic", line)


# Under pytest-xdist (make test: -n 3 --dist loadgroup) these tests share one worker: the session
# fixtures on one shared directory (.cache/slurm, .cache/kafka/run-scram), which the first worker to
# start one would stop under the other; and every Slurm, since two on one host are two slurmctlds
# and four slurmds competing for the same cores and a loaded box delays their jobs.
SHARED_SERVICES = frozenset({"slurm", "own_slurm", "accounting_slurm", "kafka_scram"})


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group the shared services' tests; the ``long`` ones first (the rest fills the other worker
    meanwhile instead of one of them ending the run alone); the ``frameworks`` tests last (``make
    test`` builds their venv in the background meanwhile)."""
    for item in items:
        if SHARED_SERVICES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("shared-services"))
    items.sort(key=lambda item: (item.get_closest_marker("frameworks") is not None,
                                 item.get_closest_marker("long") is None))


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
