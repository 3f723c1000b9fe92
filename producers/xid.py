"""XID catalogue lookup: what an XID code means, what to do, how bad it is.

The data lives in ``xid_catalogue.json`` beside this module (built from the
NVIDIA catalogue table in the telemetry reference) so operators can read and
amend it without touching code. The engine maps ``action``/``severity`` to tiers.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from gpuwarden.contract import CatalogueEntry, Severity


@cache
def _catalogue() -> tuple[dict[int, CatalogueEntry], dict, dict]:
    data = json.loads(resources.files("gpuwarden.producers").joinpath("xid_catalogue.json").read_text())
    entries = {
        e["code"]: CatalogueEntry(code=e["code"], meaning=e["meaning"], action=e["action"],
                                  severity=Severity(e["severity"]))
        for e in data["entries"]
    }
    return entries, data["generic"], data["sxid"]


def lookup(code: int) -> CatalogueEntry:
    """The catalogue entry for XID ``code``; unknown codes get a generic warning entry."""
    entries, generic, _ = _catalogue()
    entry = entries.get(code)
    if entry is not None:
        return entry.model_copy()
    return CatalogueEntry(code=code, meaning=f"{generic['meaning']} (XID {code})",
                          action=generic["action"], severity=Severity(generic["severity"]))


def lookup_sxid(code: int) -> CatalogueEntry:
    """NVSwitch SXids have no public catalogue: one generic entry naming the code."""
    _, _, sxid = _catalogue()
    return CatalogueEntry(code=code, meaning=f"{sxid['meaning']} {code}", action=sxid["action"],
                          severity=Severity(sxid["severity"]))
