"""``pip install .`` into a fresh virtualenv: the rooms exist only inside the ``gpuwarden`` namespace.

The new environment borrows the running environment's dependencies through ``.pth``
path lines, one per site-packages folder on ``sys.path`` (pydantic, aiokafka, ... without
reinstalling them; a path line does not run that folder's own ``.pth`` files, so the
editable install stays out)
and installs a copy of this checkout (so no ``build/`` left in it, and none left over from an
earlier build gets in) without build isolation: no network, a few seconds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
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
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", str(src)], check=True, capture_output=True, timeout=300, cwd=tmp_path)

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
