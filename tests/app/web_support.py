"""A real ``gpuwarden web`` over a spool a simulated ``gpuwarden run`` wrote, and a headless
Chromium driven through Selenium (Debian's browser and driver, from scripts/chromium-local).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPUWARDEN = Path(sys.executable).with_name("gpuwarden")
TOKEN_ENV = "GW_TEST_WEB_TOKEN"


def gpuwarden(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The installed command; ``timeout`` only catches a hang (#33)."""
    return subprocess.run([str(GPUWARDEN), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@dataclass(frozen=True)
class SimRun:
    """What the simulated run wrote, read back the way a user would (no node names assumed)."""

    config: Path
    nodes: list[str]
    firing: dict[str, dict]  # fingerprint → its last transition, for the alerts still open


#: Long enough for the serving scenarios (their faults start 70 min in) to leave SLO alerts open.
SIM_SPAN = "100m"


def simulated_run(tmp: Path, web: str = "") -> SimRun:
    config = tmp / "gpuwarden.yaml"
    config.write_text(f"spool: {{path: {tmp / 'spool.db'}}}\n{web}")
    record = tmp / "run.jsonl"
    r = gpuwarden("run", "--config", str(config), "--simulate", "mixed", "--nodes", "2", "--gpus", "4",
                  "--duration", SIM_SPAN, "--json", "--record", str(record))
    assert r.returncode == 0, r.stderr
    last: dict[str, dict] = {}
    for line in r.stdout.splitlines():
        t = json.loads(line)
        last[t["fingerprint"]] = t
    nodes = sorted({rec["node"] for line in record.read_text().splitlines()
                    if (rec := json.loads(line)).get("schema", "").startswith("node_snapshot")})
    assert nodes, "the recording names no node"
    return SimRun(config, nodes, {fp: t for fp, t in last.items() if t["state"] == "firing"})


@contextmanager
def web_server(config: Path, env: dict[str, str]) -> Iterator[str]:
    """``gpuwarden web --port 0``; yields its URL, read from what it prints."""
    proc = subprocess.Popen([str(GPUWARDEN), "web", "--config", str(config), "--port", "0"],
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"console at (http://\S+/)", line)
        assert m, f"gpuwarden web printed {line!r} (exit {proc.poll()})"
        yield m.group(1).rstrip("/")
    finally:
        proc.terminate()
        proc.wait(timeout=60)  # only catches a hang (#33)


def _paths() -> tuple[str, str]:
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "chromium-local"), "paths"],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        pytest.fail(f"no headless Chromium: {r.stderr.strip()}", pytrace=False)
    browser, driver = r.stdout.strip().splitlines()[-1].split()
    return browser, driver


@contextmanager
def chromium(tmp: Path) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = _paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,1400", f"--user-data-dir={tmp / 'chromium-profile'}"):
        opts.add_argument(a)
    d = webdriver.Chrome(options=opts, service=Service(executable_path=driver))
    d.implicitly_wait(5)
    try:
        yield d
    finally:
        d.quit()


def shot_dir(tmp: Path) -> Path:
    """Where screenshots go: docs/img when GPUWARDEN_DOC_SHOTS is set (to refresh the docs), else tmp."""
    return REPO / "docs" / "img" if os.environ.get("GPUWARDEN_DOC_SHOTS") else tmp


def full_page_shot(driver: object, path: Path) -> None:
    """A screenshot of the whole page: the window grown to the document's height first."""
    driver.set_window_size(1280, 600)  # type: ignore[attr-defined] - the page's own height, not the last page's
    height, chrome = driver.execute_script(  # type: ignore[attr-defined]
        "return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight]")
    driver.set_window_size(1280, min(max(height, 600), 4000) + chrome)  # type: ignore[attr-defined]
    time.sleep(0.2)
    assert driver.save_screenshot(str(path)), path  # type: ignore[attr-defined]
