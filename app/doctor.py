"""``gpuwarden doctor``: the node's checks (producers) and what this config does with alerts.

The root runs it because it reads two rooms' sections: a node can be ready while its config sends
every alert nowhere (issue #18, defect 8), which doctor must say too.
"""

from __future__ import annotations

import argparse

from gpuwarden.app.settings import Settings
from gpuwarden.notifiers.pipeline import NOWHERE
from gpuwarden.producers.doctor import Check, report, run_checks


def check_receivers(settings: Settings) -> Check:
    n = len(settings.notify.receivers)
    if n:
        return Check("receivers", True, f"{n} configured ({', '.join(r.name for r in settings.notify.receivers)})")
    return Check("receivers", False, NOWHERE, fix="add a receiver to notify.receivers (docs/notifiers.md)", warn=True)


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    return report([*run_checks(settings), check_receivers(settings)])
