"""Headless Chromium for the report test, installed from Debian packages when missing.

CI runs on a fresh machine as root, so a missing browser is installed here
rather than skipped; when that is impossible the test fails with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome")
INSTALL_TIMEOUT_S = 900
RUN_TIMEOUT_S = 90

#: Appended to a copy of the report: once everything loaded, write what rendered into the DOM.
CHECK_SCRIPT = """
<script>
window.addEventListener('load', function () {
  var ids = Array.from(document.querySelectorAll('section[id]')).map(function (s) {
    var r = s.getBoundingClientRect();
    return s.id + ':' + Math.round(r.height);
  });
  var imgs = Array.from(document.images).map(function (i) {
    return (i.closest('section') || {}).id + ':' + (i.complete ? i.naturalWidth : -1);
  });
  var d = document.createElement('pre');
  d.id = 'render-check';
  d.textContent = 'SECTIONS ' + ids.join(',') + ' IMAGES ' + imgs.join(',');
  document.body.appendChild(d);
});
</script>
"""


def _find() -> str | None:
    return next((p for n in NAMES if (p := shutil.which(n))), None)


def chromium() -> str:
    """Path of a Chromium binary; installs the Debian package when there is none."""
    if found := _find():
        return found
    if os.geteuid() != 0:
        pytest.fail("chromium is not installed and installing it needs root (apt-get install -y chromium)",
                    pytrace=False)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = []
    for cmd in (["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
                ["apt-get", "update"],
                ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=env)
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.fail(f"cannot install chromium: {' '.join(cmd)}: {e}", pytrace=False)
        log.append(f"$ {' '.join(cmd)} → exit {r.returncode}\n{r.stderr[-800:]}")
        if (found := _find()) is not None:
            return found
    pytest.fail("cannot install chromium:\n" + "\n".join(log), pytrace=False)


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    base = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--hide-scrollbars", "--user-data-dir=" + os.environ.get("TMPDIR", "/tmp")
            + f"/gw-chromium-{os.getpid()}"]
    return subprocess.run(base + args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def rendered(report: Path) -> tuple[dict[str, int], list[tuple[str, int]]]:
    """Load a copy of ``report`` with the check script; returns section heights and image widths."""
    probe = report.with_name(report.stem + ".check.html")
    probe.write_text(report.read_text(encoding="utf-8").replace("</body>", CHECK_SCRIPT + "</body>"),
                     encoding="utf-8")
    r = _run(["--virtual-time-budget=10000", "--dump-dom", probe.resolve().as_uri()])
    m = re.search(r"SECTIONS ([^\s<]*) IMAGES ([^\s<]*)", r.stdout)
    if m is None:
        pytest.fail(f"no render check in the DOM (chromium exit {r.returncode}): {r.stderr[-1500:]}",
                    pytrace=False)
    sections = {s.split(":")[0]: int(s.split(":")[1]) for s in m.group(1).split(",") if s}
    images = [(i.split(":")[0], int(i.split(":")[1])) for i in m.group(2).split(",") if i]
    return sections, images


def screenshot(report: Path, out: Path, size: str = "1280,4200") -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    r = _run([f"--screenshot={out.resolve()}", f"--window-size={size}", report.resolve().as_uri()])
    if not out.is_file() or out.stat().st_size == 0:
        pytest.fail(f"chromium wrote no screenshot (exit {r.returncode}): {r.stderr[-1500:]}", pytrace=False)
    return out
