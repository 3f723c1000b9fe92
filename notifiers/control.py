"""Control state: silences, acknowledgements and on-call overrides, and its store in the spool.

The state is a map keyed by :func:`gpuwarden.contract.record_key`, the last
write per key winning, which is exactly what a compacted Kafka topic keeps.
It lives in the ``control`` topic (``notify.control: kafka``, cluster mode)
or in the spool's key/value store (``notify.control: spool``, the default,
for standalone ``gpuwarden run``). A tombstone or an ``ends_at`` in the past
ends a silence; ``silence expire`` writes ``ends_at = now`` so the history of
who silenced what stays readable. The commands that write it are in
:mod:`gpuwarden.notifiers.control_cli`, the topic's plumbing in
:mod:`gpuwarden.notifiers.kafka`.
"""

from __future__ import annotations

import logging

from gpuwarden.contract import (Ack, AlertTransition, ContractError, OnCallOverride, Silence, decode_control, encode,
                                record_key)
from gpuwarden.spool import Spool
from gpuwarden.notifiers.matchers import alert_labels, matches_all
from gpuwarden.notifiers.oncall import Cover

ControlRecord = Silence | Ack | OnCallOverride
KV_NS = "control"
log = logging.getLogger("gpuwarden.notify")


def warn_each(problems: list[str]) -> None:
    """Bad control records are reported and skipped: one typo must not stop the notifier."""
    for p in problems:
        log.warning("%s (ignored)", p)


class ControlState:
    """Silences, acks and overrides by key; the router asks it questions at a given time."""

    def __init__(self) -> None:
        self._records: dict[str, ControlRecord] = {}
        self._silences: list[Silence] | None = None  # sorted cache, rebuilt after a change
        self._index: dict[tuple[str, str], list[Silence]] = {}
        self._unindexed: list[Silence] = []

    @property
    def records(self) -> dict[str, ControlRecord]:
        return self._records

    @records.setter
    def records(self, value: dict[str, ControlRecord]) -> None:
        self._records, self._silences = value, None

    def apply(self, record: ControlRecord) -> None:
        self._records[record_key(record)] = record
        self._silences = None

    def apply_raw(self, key: str, value: bytes | None) -> None:
        """One record as stored (a ``None`` value is a tombstone); raises ContractError if malformed."""
        if value is None:
            self._records.pop(key, None)
            self._silences = None
        else:
            self.apply(decode_control(value))

    def silences(self, now: float | None = None) -> list[Silence]:
        """All silences, or those active at ``now``, oldest first."""
        if self._silences is None:
            self._silences = sorted((r for r in self._records.values() if isinstance(r, Silence)),
                                    key=lambda s: (s.starts_at, s.id))
            self._index, self._unindexed = {}, []
            for sil in self._silences:
                eq = next((m for m in sil.matchers if m.op == "="), None)
                if eq is None:
                    self._unindexed.append(sil)
                else:
                    self._index.setdefault((eq.label, eq.value), []).append(sil)
        return [s for s in self._silences if now is None or s.starts_at <= now < s.ends_at]

    def silenced_by(self, t: AlertTransition, now: float) -> str | None:
        """The id of the oldest active silence matching the alert, if any.

        Silences are indexed by one of their ``=`` matchers, so an alert is checked
        against the few that could match, not all of them.
        """
        if self._silences is None:
            self.silences()
        if not self._silences:
            return None
        labels = alert_labels(t)
        candidates = list(self._unindexed)
        for item in labels.items():
            candidates += self._index.get(item, ())
        hits = [s for s in candidates if s.starts_at <= now < s.ends_at and matches_all(s.matchers, labels)]
        return min(hits, key=lambda s: (s.starts_at, s.id)).id if hits else None

    def ack(self, t: AlertTransition) -> Ack | None:
        """The ack of this alert's current episode (an ack from before it started does not count)."""
        a = self._records.get(f"ack:{t.fingerprint}")
        return a if isinstance(a, Ack) and a.at >= t.started_at else None

    def covers(self, schedule: str) -> list[Cover]:
        return [Cover(r.user, r.starts_at, r.ends_at) for r in self._records.values()
                if isinstance(r, OnCallOverride) and r.schedule == schedule]


# ----------------------------------------------------------------------- stores


def load_spool(spool: Spool, state: ControlState | None = None) -> tuple[ControlState, list[str]]:
    """Read the spool's control records into ``state``; returns it and one line per bad record."""
    state = state or ControlState()
    problems = []
    fresh = ControlState()
    for key, value in spool.kv_items(KV_NS):
        try:
            fresh.apply_raw(key, value)
        except ContractError as e:
            problems.append(f"control record {key}: {e}")
    state.records = fresh.records
    return state, problems


def write_spool(spool: Spool, record: ControlRecord) -> None:
    spool.kv_put(KV_NS, record_key(record), encode(record))
