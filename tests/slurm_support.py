"""pytest plugin: a real Slurm for tests marked ``@pytest.mark.slurm``.

* ``slurm`` (session fixture, :class:`LocalSlurm`): ``scripts/slurm-local start`` (two nodes,
  gn1 and gn2, of 4 GPUs each; stopped at session end unless it was already running). A Slurm
  that cannot be started fails the tests; it never skips them.
* ``own_slurm`` (function fixture): a second Slurm of the test's own (``SLURM_LOCAL_DIR``), which
  it may stop and start again.
* ``accounting_slurm`` (function fixture): a Slurm of the test's own with accounting
  (``start --accounting``: slurmdbd on a local MariaDB), so ``sacct`` answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hang import HANG_S

REPO_ROOT = Path(__file__).resolve().parent.parent
SLURM_LOCAL = REPO_ROOT / "scripts" / "slurm-local"
#: Where the test jobs' output goes (sbatch's default, slurm-N.out in the working directory,
#: left files in the repository's root).
JOB_OUTPUT = Path(tempfile.gettempdir()) / "gpuwarden-slurm-jobs"
#: What a wait on the controller allows: it returns at the event, so only a hang fails it (#33: 30 s
#: could pass on a busy machine before a job changed state).


def slurm_local(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SLURM_LOCAL), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT, env={**os.environ, **(env or {})})


@dataclass(frozen=True)
class LocalSlurm:
    conf: str
    local_env: dict[str, str]

    @property
    def env(self) -> dict[str, str]:
        """The environment Slurm's commands need (``SLURM_CONF``)."""
        return {"SLURM_CONF": self.conf}

    def run(self, *argv: str) -> str:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, **self.env})
        assert proc.returncode == 0, f"{' '.join(argv)}: {proc.stderr.strip()}"
        return proc.stdout

    def sbatch(self, *args: str, wrap: str = "sleep 600") -> str:
        """Submit a real batch job; its id."""
        JOB_OUTPUT.mkdir(exist_ok=True)
        out = self.run("sbatch", "--parsable", "-c", "1", f"--output={JOB_OUTPUT}/slurm-%j.out", *args,
                       "--wrap", wrap)
        return out.strip().split(";")[0]

    def fragment(self) -> tuple[str, str, str, str]:
        """The fragmentation case, for real: a 2-GPU job running on each node (a, b), then a 4-GPU
        job pending for ``Resources`` (4 free in total, no node with 4) and one behind it pending
        for ``Priority``; their ids, once a scheduling pass gave the reasons. Cancels all first."""
        self.cancel_all()
        a = self.sbatch("-J", "train-a", "-w", "gn1", "--gres=gpu:2")
        b = self.sbatch("-J", "train-b", "-w", "gn2", "--gres=gpu:2")
        self.wait_state(a, "RUNNING")
        self.wait_state(b, "RUNNING")
        big = self.sbatch("-J", "big", "--gres=gpu:4", wrap="sleep 60")
        later = self.sbatch("-J", "later", "--gres=gpu:4", wrap="sleep 60")
        self.wait_reasons(big, later)
        return a, b, big, later

    def wait_reasons(self, *jobs: str) -> None:
        """Until a scheduling pass gave each pending job its reason (``None`` before the first):
        a wait on it, not a fixed 3 s (#33)."""
        deadline = time.monotonic() + HANG_S
        while "None" in (reasons := [self.run("squeue", "-h", "-j", j, "-o", "%r").strip() for j in jobs]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs {jobs} without a pending reason after {HANG_S:.0f} s: {reasons}")
            time.sleep(0.3)

    def cancel_all(self) -> None:
        """Cancel every job and wait until none is left running or pending."""
        self.run("scancel", "--user", os.environ.get("USER", "root"))
        deadline = time.monotonic() + HANG_S
        while self.run("squeue", "-h", "-o", "%i").strip():
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs still queued {HANG_S:.0f} s after scancel")
            time.sleep(0.3)

    def wait_state(self, job: str, state: str, timeout: float = HANG_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.run("squeue", "-h", "-j", job, "-o", "%T").strip() == state:
                return
            time.sleep(0.3)
        raise TimeoutError(f"job {job} not {state} within {timeout:.0f} s")

    def stop(self) -> None:
        slurm_local("stop", env=self.local_env)

    def start(self) -> None:
        _start(self.local_env)


def _start(env: dict[str, str] | None, *options: str) -> str:
    proc = slurm_local("start", *options, env=env)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("SLURM_CONF="):
        pytest.fail(f"scripts/slurm-local start failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}",
                    pytrace=False)
    return lines[-1].removeprefix("SLURM_CONF=")


@pytest.fixture(scope="session")
def slurm() -> Iterator[LocalSlurm]:
    was_running = slurm_local("status", timeout=30).returncode == 0
    s = LocalSlurm(_start(None), {})
    try:
        yield s
    finally:
        if not was_running:
            s.stop()


@pytest.fixture
def own_slurm(tmp_path: Path) -> Iterator[LocalSlurm]:
    env = {"SLURM_LOCAL_DIR": str(tmp_path / "slurm")}
    s = LocalSlurm(_start(env), env)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def accounting_slurm(tmp_path: Path) -> Iterator[LocalSlurm]:
    env = {"SLURM_LOCAL_DIR": str(tmp_path / "slurm")}
    s = LocalSlurm(_start(env, "--accounting"), env)
    try:
        yield s
    finally:
        s.stop()
