"""The ``clean`` fixture: the shared Slurm's two nodes in service before and after a test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.remediation.support import node_state, settled
from tests.slurm_support import LocalSlurm


@pytest.fixture
def clean(slurm: LocalSlurm) -> Iterator[LocalSlurm]:
    """Both nodes back in service before and after (a failed test must not leave one drained)."""
    def resume_all() -> None:
        for n in ("gn1", "gn2"):
            if "DRAIN" in node_state(slurm, n)[0]:
                slurm.run("scontrol", "update", f"nodename={n}", "state=resume")
    slurm.cancel_all()
    resume_all()
    for n in ("gn1", "gn2"):
        settled(slurm, n)
    yield slurm
    resume_all()
