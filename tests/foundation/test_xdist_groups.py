"""The tests of the shared services (one Slurm, one SCRAM broker: tests/conftest.py
``SHARED_SERVICES``) run on one pytest-xdist worker, one after the other, as ``make test``'s
``--dist loadgroup`` promises. pytest 9.2 broke that silently with pytest-xdist 3.8 (a node's id
comes from ``_id`` there; xdist still sets ``_nodeid`` to add the group): every test became its own
group, and a requeue test on one worker had its job cancelled by another worker's Slurm test
(2026-12-06). Here three such tests run under ``-n 3 --dist loadgroup`` through this suite's own
collection hook, and must land on one worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CONFTEST = '''
import pytest
from tests.conftest import pytest_collection_modifyitems  # noqa: F401 - the suite's grouping hook

@pytest.fixture
def slurm():
    return None
'''

TESTS = '''
import os
from pathlib import Path

def _where(name):
    Path(os.environ["OUT"], name).write_text(os.environ["PYTEST_XDIST_WORKER"])

def test_shared_1(slurm): _where("1")
def test_shared_2(slurm): _where("2")
def test_shared_3(slurm): _where("3")
def test_free_a(): pass
def test_free_b(): pass
'''


def test_the_shared_services_tests_run_on_one_xdist_worker(tmp_path: Path) -> None:
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "conftest.py").write_text(CONFTEST)
    (suite / "test_grouped.py").write_text(TESTS)
    env = {**os.environ, "OUT": str(out), "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3",
                           "--dist", "loadgroup", "--rootdir", str(suite), str(suite)],
                          capture_output=True, text=True, env=env, cwd=suite)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    workers = {p.name: p.read_text() for p in out.iterdir()}
    assert len(workers) == 3 and len(set(workers.values())) == 1, workers
