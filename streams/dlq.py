"""Boundary decoding for the stream workers: a record either parses or becomes a dead letter.

A malformed record must never stop a worker, and must never be lost either:
it goes to ``<topic>.dlq`` as a :class:`gpuwarden.contract.DeadLetter` holding
the original key and value bytes (an oversized value: its prefix, length and
hash), where it came from (topic, partition, offset) and the validation error
naming the fields at fault. A letter the broker still refuses is written to
the worker's local :class:`gpuwarden.deadletter.UnsentLog` instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, Protocol

from gpuwarden.config import CommonSettings
from gpuwarden.contract import (
    DEFAULT_MAX_FUTURE_SKEW_S,
    DEFAULT_MAX_PAST_SKEW_S,
    DEFAULT_MAX_RECORD_BYTES,
    ContractError,
    Salvaged,
    Topics,
    decode,
    record_key,
    salvage_task_metrics,
)
from gpuwarden.deadletter import letter


class Consumed(Protocol):
    """What the workers read of a consumed record: aiokafka's ``ConsumerRecord`` as
    it comes (a copy per record costs a stream worker CPU), or an :class:`Inbound`."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


@dataclass(frozen=True)
class Inbound:
    """One consumed Kafka record, free of any client library's types (tests, tools)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True)
class Outbound:
    """One record to produce: raw key and value bytes for ``topic``, Kafka headers, and the
    partition when it is not the key's."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    partition: int | None = None


@dataclass(frozen=True)
class Limits:
    """The decode limits a worker applies at its boundary (from ``settings.limits``)."""

    max_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_future_skew_s: float = DEFAULT_MAX_FUTURE_SKEW_S
    max_past_skew_s: float = DEFAULT_MAX_PAST_SKEW_S

    @classmethod
    def of(cls, settings: CommonSettings) -> "Limits":
        lim = settings.limits
        return cls(int(lim.max_record_bytes), float(lim.max_future_skew), float(lim.max_past_skew))


#: Dead-letter reasons as metric labels: the first word of a letter's reason when it is one of
#: these (``record: ... exceeds the limit``, ``schema: ...``, ``key: ...``, ``engine: ...``,
#: ``decode: ...``); not JSON at all (``<record>: Invalid JSON``) is ``json``, and a field's
#: validation error (``gpus[0].util_gpu: ...``) is ``field``.
REASONS = frozenset({"record", "schema", "key", "engine", "decode"})


def reason_label(why: str) -> str:
    """A bounded label for a dead letter's reason (the text itself names fields and values)."""
    head = why.partition(":")[0]
    return head if head in REASONS else "json" if head == "<record>" else "field"


def to_dlq(msg: Consumed, error: str, *, dlq_topic: str | None = None,
           max_bytes: int = DEFAULT_MAX_RECORD_BYTES, value: bytes | None = None) -> Outbound:
    """The dead letter for ``msg`` (or for ``value``, a part of it: one bad item of a batch),
    bound for ``<topic>.dlq`` (see :func:`gpuwarden.deadletter.letter`)."""
    held = (msg.value or b"") if value is None else value
    key, value = letter(msg.topic, msg.partition, msg.offset, msg.key, held, error, max_bytes)
    return Outbound(dlq_topic or Topics.dlq(msg.topic), key, value)


def decode_inbound(
    msg: Consumed, model: Any, limits: Limits, *,
    key_of: Callable[[Any], str] | None = record_key, now: float | None = None,
) -> Any:
    """Parse ``msg.value`` as ``model`` or raise :class:`ContractError`.

    With ``key_of`` the Kafka key must equal the key the record should travel
    under (by default the design's ``record_key``): a record on the wrong key
    lands on the wrong partition, and its state would be split between workers.
    """
    if msg.value is None:
        raise ContractError("record: null value (tombstone)", ["record"])
    record = decode(
        msg.value, model,
        now=time.time() if now is None else now,
        max_bytes=limits.max_bytes, max_future_skew_s=limits.max_future_skew_s,
        max_past_skew_s=limits.max_past_skew_s,
    )
    if key_of is not None:
        want = key_of(record).encode()
        if msg.key != want:
            got = "null" if msg.key is None else repr(msg.key[:64].decode(errors="replace"))
            raise ContractError(f"key: record key {got} does not match {want.decode()!r}", ["key"])
    return record


def salvage_inbound(msg: Consumed, limits: Limits, now: float) -> Salvaged | None:
    """A ``task.metrics`` batch :func:`decode_inbound` rejected, its items checked one by one
    (:func:`gpuwarden.contract.salvage_task_metrics`): None when the record as a whole is at
    fault (a tombstone, over the size limit, on another node's key, a bad envelope)."""
    if msg.value is None or len(msg.value) > limits.max_bytes:
        return None
    got = salvage_task_metrics(msg.value, now=now, max_future_skew_s=limits.max_future_skew_s,
                               max_past_skew_s=limits.max_past_skew_s)
    if got is None or msg.key != record_key(got.batch).encode():
        return None
    return got
