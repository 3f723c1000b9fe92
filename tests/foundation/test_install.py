"""``pip wheel .`` and that wheel installed into a fresh virtualenv: the rooms exist only inside the
``gpuwarden`` namespace, and the wheel carries the console's static files and templates, so
``gpuwarden web`` serves from the installed (non-editable) copy (#33).

The new environment borrows the running environment's dependencies through ``.pth``
path lines, one per site-packages folder on ``sys.path`` (pydantic, aiokafka, ... without
reinstalling them; a path line does not run that folder's own ``.pth`` files, so the
editable install stays out)
and builds a copy of this checkout (so no ``build/`` left in it, and none left over from an
earlier build gets in) without build isolation: no network, a few seconds.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import urllib.request
import venv
import zipfile
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", ".cache", "build", "dist", "var", "artifacts",
                                    "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache")

PROBE = """
import importlib, json
out = {}
for name in ("streams", "producers", "notifiers", "history", "app"):
    try:
        importlib.import_module(name)
        out[name] = "imported"
    except ModuleNotFoundError:
        out[name] = "missing"
import gpuwarden.app.cli, gpuwarden.history.retro, gpuwarden.notifiers.router, gpuwarden.producers.agent
import gpuwarden.streams
out["gpuwarden.streams"] = gpuwarden.streams.__file__
print(json.dumps(out))
"""


def test_installed_rooms_live_in_the_gpuwarden_namespace(tmp_path):
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                        text=True).strip())
    borrowed = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    (site / "borrowed.pth").write_text("".join(f"{p}\n" for p in borrowed))
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=NOT_SOURCE)
    wheels = tmp_path / "wheel"
    built = subprocess.run([python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
                            str(wheels), str(src)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    assert "absent from the `packages` configuration" not in built.stdout + built.stderr  # "would be ignored"
    (wheel,) = wheels.glob("gpuwarden-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("static", "templates"):
        want = {f"gpuwarden/app/{folder}/{f.name}" for f in (REPO / "app" / folder).iterdir() if f.is_file()}
        assert want and want <= shipped, sorted(want - shipped)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, timeout=300, cwd=tmp_path)

    out = tmp_path / "elsewhere"
    out.mkdir()
    r = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120, cwd=out)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert {k: got[k] for k in ("streams", "producers", "notifiers", "history", "app")} == dict.fromkeys(
        ("streams", "producers", "notifiers", "history", "app"), "missing")
    assert Path(got["gpuwarden.streams"]).is_relative_to(site), got  # the installed copy, not the checkout

    cli = subprocess.run([env / "bin" / "gpuwarden", "--version"], capture_output=True, text=True,
                         timeout=60, cwd=out)
    assert cli.returncode == 0 and cli.stdout.startswith("gpuwarden "), cli.stderr

    # The console from the installed copy: a page from its templates, a file from its static folder.
    config = tmp_path / "gpuwarden.yaml"
    config.write_text(f"spool: {{path: {tmp_path / 'spool.db'}}}\n")
    web = subprocess.Popen([env / "bin" / "gpuwarden", "web", "--config", str(config), "--port", "0"],
                           stderr=subprocess.PIPE, text=True, cwd=out)
    try:
        line = web.stderr.readline()
        m = re.search(r"console at (http://\S+?)/?\s", line)
        assert m, f"gpuwarden web printed {line!r} (exit {web.poll()})"
        page = urllib.request.urlopen(f"{m.group(1)}/silences", timeout=60).read().decode()
        assert "/static/console.css" in page, page[:2000]
        css = urllib.request.urlopen(f"{m.group(1)}/static/console.css", timeout=60).read()
        assert css == (site / "gpuwarden" / "app" / "static" / "console.css").read_bytes() != b""
    finally:
        web.terminate()
        web.wait(timeout=60)

    # What pip would install with it: the wheel's Requires-Dist. faust-streaming and mode are gone
    # (issue #29); aiokafka's range admits the next minor release and not the one after.
    meta = subprocess.run([python, "-c", "import importlib.metadata as m; print('\\n'.join(m.requires('gpuwarden')))"],
                          capture_output=True, text=True, timeout=60, cwd=out)
    requires = [Requirement(line) for line in meta.stdout.splitlines() if line.strip()]
    assert not {r.name.lower() for r in requires} & {"faust-streaming", "faust", "mode-streaming", "mode"}
    (aiokafka,) = [r for r in requires if r.name == "aiokafka"]
    installed = version("aiokafka")
    major, minor = (int(x) for x in installed.split(".")[:2])
    assert installed in aiokafka.specifier and f"{major}.{minor + 1}.0" in aiokafka.specifier
    assert f"{major}.{minor + 2}.0" not in aiokafka.specifier
