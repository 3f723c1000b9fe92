"""No secret in any output of a full standalone run with Feishu and DingTalk receivers.

``gpuwarden -vv run --simulate mixed --duration 2h`` in a subprocess, receivers'
URLs (with their tokens) and signing secrets from environment variables, pointed
at the loopback fakes. Searched: every stdout/stderr line (debug logging on),
every row, record (read back from the compressed blocks too) and key/value entry in
the spool, and the delivery log as printed by ``gpuwarden notify --log``.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from gpuwarden.spool import Spool
from tests.fakes.http import FakeDingTalk, FakeFeishu

REPO = Path(__file__).resolve().parents[2]
SECRETS = {"GW_FS_SECRET": "feishu-signing-secret-a1b2c3", "GW_DT_SECRET": "SECdingtalk-signing-secret-d4e5f6"}


def test_full_run_leaks_no_secret(tmp_path):
    with FakeFeishu(secret=SECRETS["GW_FS_SECRET"]) as fs, FakeDingTalk(secret=SECRETS["GW_DT_SECRET"]) as dt:
        urls = {"GW_FS_URL": fs.base + fs.hook, "GW_DT_URL": f"{dt.base}/robot/send?access_token={dt.token}"}
        cfg = tmp_path / "gpuwarden.yaml"
        cfg.write_text(
            f"spool: {{path: {tmp_path / 'spool.db'}}}\n"
            "notify:\n  team: fs\n  owners: {default: fs}\n  escalation: [{receivers: [dt]}]\n  receivers:\n"
            "    - {name: fs, accept_simulated: true, feishu: {url: {env: GW_FS_URL}, secret: {env: GW_FS_SECRET}}}\n"
            "    - {name: dt, accept_simulated: true, dingtalk: {url: {env: GW_DT_URL}, secret: {env: GW_DT_SECRET}}}\n")
        env = {**os.environ, **SECRETS, **urls}
        run = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "-vv", "run", "--config", str(cfg),
                              "--simulate", "mixed", "--duration", "2h", "--json"],
                             capture_output=True, text=True, timeout=180, cwd=REPO, env=env)
        assert run.returncode == 0, run.stderr[-2000:]
        log = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "notify", "--config", str(cfg), "--log", "1000"],
                             capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
        delivered = len(fs.accepted) + len(dt.accepted)
    db = sqlite3.connect(tmp_path / "spool.db")
    tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    rows = [repr(row) for t in tables for row in db.execute(f"SELECT * FROM {t}")]  # noqa: S608 - our own tables
    namespaces = [ns for (ns,) in db.execute("SELECT DISTINCT ns FROM kv")]
    db.close()
    with Spool(tmp_path / "spool.db") as spool:  # history's blocks and big state are compressed: read back
        rows += [repr(r) for r in spool.read()]
        rows += [repr(item) for ns in namespaces for item in spool.kv_items(ns)]
    haystack = "\n".join([run.stdout, run.stderr, log.stdout, log.stderr, *rows])
    assert run.stdout.count("\n") > 5 and delivered > 0, "the run must have alerted and delivered"
    assert "DEBUG" in run.stderr and len(rows) > 1000  # there was plenty to search
    values = {**SECRETS, **urls, "feishu hook id": "feishu-hook-id-secret", "dingtalk token": dt.token}
    leaked = [name for name, value in values.items() if value in haystack]
    assert leaked == [], f"secret values found in the output: {leaked}"
