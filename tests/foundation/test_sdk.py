"""The task SDK is importable by a training job with the standard library alone."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
before = set(sys.modules)
import gpuwarden.sdk
task = gpuwarden.sdk.Task("probe", "p-1", socket_path="/nonexistent/agent.sock")
with task.step() as s:
    with s.data():
        pass
task.checkpoint_begin(); task.checkpoint_end(); task.throughput(1.0); task.exit(0)
new = {m.split(".")[0] for m in set(sys.modules) - before}
print(json.dumps(sorted(new - set(sys.stdlib_module_names))))
"""


def test_sdk_imports_nothing_outside_the_standard_library(tmp_path):
    # A fresh interpreter (what a training job is), outside the repository.
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["gpuwarden"]
