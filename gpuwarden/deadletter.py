"""Dead letters the broker would not take, kept on the worker's disk instead.

A dead letter is bounded (:func:`gpuwarden.contract.dead_letter`), and the DLQ topics
take 16 MiB records, but a broker configured otherwise, or a topic created before
with a smaller ``max.message.bytes``, can still refuse one. The worker must not stop
on that (a refused letter that escaped the handler put every worker into a crash
loop on the same record), so the letter goes to a local JSONL file with the reason,
is counted, and the worker moves on.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from gpuwarden.contract import DEAD_LETTER_KEY_PREFIX, DEFAULT_MAX_RECORD_BYTES, dead_letter, encode

log = logging.getLogger("gpuwarden.deadletter")


def letter(topic: str, partition: int | None, offset: int | None, key: bytes | None, value: bytes,
           error: str, max_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> tuple[bytes | None, bytes]:
    """The Kafka key and value of the dead letter of one consumed record: keyed like the
    original (at most its first KiB), the value kept whole up to ``max_bytes``."""
    dl = dead_letter(topic, value, error, key=key, partition=partition, offset=offset, max_bytes=max_bytes)
    return (None if key is None else key[:DEAD_LETTER_KEY_PREFIX]), encode(dl)


class UnsentLog:
    """Appends one JSON line per output the broker refused: where it was bound, why, the record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0

    def record(self, topic: str, key: bytes | None, value: bytes, error: BaseException) -> None:
        self.count += 1
        why = f"{type(error).__name__}: {error}"
        log.error("broker refused a record for %s (%d bytes): %s; kept in %s (%d so far)",
                  topic, len(value), why, self.path, self.count)
        line = {"at": time.time(), "topic": topic, "error": why[:2048], "value_bytes": len(value),
                "key": None if key is None else key.decode(errors="replace"),
                "value": value.decode(errors="replace")}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
