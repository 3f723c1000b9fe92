"""The open alerts of an alert history (the ``alerts`` topic a standalone run keeps in its spool):
the newest transition of each fingerprint, firing or not.

Kept as an index that takes records one at a time, so a reader that follows the spool (the web
console) adds what was appended since its last look instead of reading the history again.
"""

from __future__ import annotations

from gpuwarden.contract import AlertState, AlertTransition, ContractError, decode


class AlertLog:
    """The newest transition per fingerprint, in the order fingerprints first appeared."""

    def __init__(self) -> None:
        self.latest: dict[str, AlertTransition] = {}

    def add(self, value: bytes) -> None:
        """One stored transition; a record that does not decode is passed over, as a replay would."""
        try:
            t = decode(value, AlertTransition)
        except ContractError:
            return
        self.latest[t.fingerprint] = t

    def firing(self) -> dict[str, AlertTransition]:
        return {fp: t for fp, t in self.latest.items() if t.state == AlertState.FIRING}
