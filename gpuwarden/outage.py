"""One line per cause while Kafka is away, one when it is back.

During a broker outage aiokafka logs every failed connect, metadata refresh and fetch (about a
hundred lines a second from one worker), and our own retry loops would add a line per try. An
operator needs to know that Kafka is away, why, and when it came back. :class:`KafkaLogGate`
(installed on the root handlers by the CLI) lets through a Kafka-trouble line only when its cause
was not logged in the last ``WINDOW_S`` and no such line was logged in the last ``SPACING_S``, and
counts what it held back; :func:`recovered` logs the one recovery line with the outage's length.
A trouble line is any WARNING or worse from aiokafka's loggers, or one of ours logged with
``extra=trouble("cause")``.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

#: A cause logged once is not logged again within this.
WINDOW_S = 30.0
#: At most one trouble line within this, whatever its cause.
SPACING_S = 10.0

log = logging.getLogger("gpuwarden.kafka")


def trouble(cause: str) -> dict[str, Any]:
    """``extra=`` for one of our log calls about Kafka being unreachable; ``cause`` names it."""
    return {"kafka_trouble": cause}


class _Outage:
    """The process's one record of Kafka trouble: since when, what was held back."""

    def __init__(self) -> None:
        self.since: float | None = None  # monotonic time of the first trouble line of this outage
        self.held = 0  # trouble lines held back since the last one let through
        self.held_total = 0
        self.last_any = -math.inf
        self.last: dict[str, float] = {}

    def admit(self, cause: str, now: float) -> int | None:
        """Whether a trouble line of ``cause`` may go out now: ``None`` if not, else how many were held back."""
        if self.since is None:
            self.since = now
        if now - self.last_any < SPACING_S or now - self.last.get(cause, -math.inf) < WINDOW_S:
            self.held += 1
            self.held_total += 1
            return None
        held, self.held = self.held, 0
        self.last_any = self.last[cause] = now
        return held

    def end(self, now: float) -> tuple[float, int] | None:
        """The outage's length and lines held back, if there was one; the next trouble starts a new one."""
        if self.since is None:
            return None
        out = (now - self.since, self.held_total)
        self.__init__()  # type: ignore[misc]
        return out


OUTAGE = _Outage()


class KafkaLogGate(logging.Filter):
    """A handler filter: Kafka-trouble lines rate-limited per cause and overall, others untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Decided once per record: with the gate on two handlers (a console and a file), the
        second would otherwise see the line the first let through as a repeat and drop it."""
        decided = getattr(record, "kafka_gate_admitted", None)
        if decided is None:
            decided = record.kafka_gate_admitted = self._admit(record)
        return bool(decided)

    @staticmethod
    def _admit(record: logging.LogRecord) -> bool:
        cause = getattr(record, "kafka_trouble", None)
        if cause is None:
            if not record.name.startswith("aiokafka") or record.levelno < logging.WARNING:
                return True
            cause = f"{record.name}: {record.msg}"  # the message template: one cause per kind of failure
        held = OUTAGE.admit(str(cause), time.monotonic())
        if held is None:
            return False
        if held:
            record.msg = f"{record.msg} ({held} more Kafka lines held back)"
        return True


def install() -> None:
    """Put the gate on every handler of the root logger (handler filters see child loggers' records)."""
    gate = KafkaLogGate()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, KafkaLogGate) for f in handler.filters):
            handler.addFilter(gate)


def recovered(what: str) -> None:
    """Kafka answered again (``what`` did): one line with the outage's length, if there was one."""
    ended = OUTAGE.end(time.monotonic())
    if ended is not None and (ended[1] or ended[0] >= SPACING_S):  # a blip (a topic's first leader) says nothing
        seconds, held = ended
        log.warning("Kafka reachable again (%s) after %.0f s of trouble; %d lines about it held back", what,
                    seconds, held)
