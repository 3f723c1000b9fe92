"""The Kafka-trouble gate (gpuwarden/outage.py): what an operator's log gets during a broker outage."""

from __future__ import annotations

import logging

import pytest

from gpuwarden import outage


class Keep(logging.Handler):
    """Keeps each message it is handed."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[float]]:
    """A handler with the gate, a fresh outage record and a clock the test moves."""
    clock = [1000.0]
    monkeypatch.setattr(outage, "OUTAGE", outage._Outage())
    monkeypatch.setattr(outage.time, "monotonic", lambda: clock[0])
    lines: list[str] = []
    handler = Keep(lines)
    handler.addFilter(outage.KafkaLogGate())
    root = logging.getLogger()
    root.addHandler(handler)
    old = root.level
    root.setLevel(logging.INFO)
    yield lines, clock
    root.removeHandler(handler)
    root.setLevel(old)


def test_a_minute_of_aiokafka_errors_gives_a_line_per_cause_window_then_one_recovery(gated) -> None:
    lines, clock = gated
    conn, fetch = logging.getLogger("aiokafka.conn"), logging.getLogger("aiokafka.consumer.fetcher")
    ours = logging.getLogger("gpuwarden.streams")
    for step in range(600):  # 60 s, ten tries a second from each of three places
        clock[0] = 1000.0 + step / 10
        conn.error("Unable connect to node with id %s: %s", 1, "Connect call failed")
        fetch.error("Failed fetch messages from %s: %s", 1, "NodeNotReadyError")
        ours.warning("fetch failed: %s", "KafkaConnectionError", extra=outage.trouble("fetch"))
    assert len(lines) <= 7  # at most one a 10 s
    assert sum("Unable connect" in line for line in lines) <= 2  # each cause at most once a 30 s
    assert "Unable connect to node with id 1" in lines[0]
    assert any("more Kafka lines held back" in line for line in lines[1:])
    logging.getLogger("gpuwarden.other").warning("a line about something else")  # never gated
    assert lines[-1] == "a line about something else"
    clock[0] += 1
    outage.recovered("records published")
    outage.recovered("records published")  # said once
    back = [line for line in lines if "reachable again" in line]
    assert len(back) == 1 and "after 61 s" in back[0]


def test_info_lines_and_a_blip_pass_without_a_recovery_line(gated) -> None:
    lines, clock = gated
    logging.getLogger("aiokafka.consumer.group_coordinator").info("Joined group")
    logging.getLogger("aiokafka.consumer.fetcher").error("Failed fetch offsets: NotLeaderForPartitionError")
    clock[0] += 2
    outage.recovered("end offsets read")
    assert lines == ["Joined group", "Failed fetch offsets: NotLeaderForPartitionError"]


def test_a_line_let_through_reaches_every_gated_handler(gated) -> None:
    """A process logging to two handlers (console and file), each with the gate: the line one
    lets through is the other's too, not a repeat to hold back (found with pytest's two)."""
    lines, clock = gated
    second: list[str] = []
    handler = Keep(second)
    handler.addFilter(outage.KafkaLogGate())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        ours = logging.getLogger("gpuwarden.producers.publisher")
        ours.warning("Kafka unavailable (%s)", "authentication failed", extra=outage.trouble("publish"))
        clock[0] += 1
        ours.warning("Kafka unavailable (%s)", "authentication failed", extra=outage.trouble("publish"))
    finally:
        root.removeHandler(handler)
    assert lines == second == ["Kafka unavailable (authentication failed)"]
