"""The layers hold: the foundation imports no room, a room no other room nor the root, no circles.

The check itself is ``scripts/check-layers`` (standard library only, runnable by
hand); these tests run it on the repository and on small made-up trees that
break each rule once, so a checker that stopped seeing a violation would fail here.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check-layers"

PYPROJECT = """
[tool.setuptools.package-dir]
"gpuwarden" = "gpuwarden"
"gpuwarden.streams" = "streams"
"gpuwarden.notifiers" = "notifiers"
"gpuwarden.app" = "app"
"""


def _checker() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("check_layers", str(SCRIPT))
    spec = importlib.util.spec_from_loader("check_layers", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_layers"] = module  # dataclasses look their module up while the class is made
    loader.exec_module(module)
    return module


check = _checker()


def tree(root: Path, files: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    for folder in ("gpuwarden", "streams", "notifiers", "app"):
        (root / folder).mkdir()
        (root / folder / "__init__.py").write_text("")
    (root / "gpuwarden" / "units.py").write_text("import re\n")
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_the_repository_keeps_its_layers():
    assert check.violations(REPO) == []


def test_the_script_says_ok():
    r = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout


def test_a_well_layered_tree_passes(tmp_path):
    root = tree(tmp_path, {
        "streams/engine.py": "from gpuwarden.units import re\nfrom . import rules\n",
        "streams/rules.py": "import gpuwarden.units\n",
        "notifiers/router.py": "from gpuwarden import units\n",
        "app/cli.py": "from gpuwarden.streams.engine import x\nimport gpuwarden.notifiers.router\n",
    })
    assert check.violations(root) == []


@pytest.mark.parametrize(("files", "expected"), [
    ({"gpuwarden/config.py": "def f():\n    from gpuwarden.streams.rules import R\n",
      "streams/rules.py": ""},
     "gpuwarden.config (foundation) imports gpuwarden.streams.rules (room gpuwarden.streams)"),
    ({"gpuwarden/config.py": "import gpuwarden.app.cli\n", "app/cli.py": ""},
     "gpuwarden.config (foundation) imports gpuwarden.app.cli (composition root)"),
    ({"notifiers/localise.py": "from gpuwarden.streams import rules\n", "streams/rules.py": ""},
     "gpuwarden.notifiers.localise (room gpuwarden.notifiers) imports gpuwarden.streams.rules "
     "(room gpuwarden.streams)"),
    ({"streams/standalone.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                               "    from gpuwarden.app.settings import Settings\n", "app/settings.py": ""},
     "gpuwarden.streams.standalone (room gpuwarden.streams) imports gpuwarden.app.settings "
     "(composition root)"),
    ({"streams/engine.py": "from .nodestage import NodeStage\n",
      "streams/nodestage.py": "def f():\n    from gpuwarden.streams.engine import Engine\n"},
     "import circle of 2 modules: gpuwarden.streams.engine, gpuwarden.streams.nodestage"),
])
def test_each_kind_of_violation_is_found(tmp_path, files, expected):
    assert check.violations(tree(tmp_path, files)) == [expected]


def test_the_script_fails_on_a_violation(tmp_path):
    root = tree(tmp_path, {"gpuwarden/config.py": "import gpuwarden.streams.config\n", "streams/config.py": ""})
    script = root / "scripts" / "check-layers"
    script.parent.mkdir()
    script.write_text(SCRIPT.read_text())
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "gpuwarden.config (foundation) imports gpuwarden.streams.config" in r.stdout


def test_the_architecture_map_names_files_that_exist():
    text = (REPO / "docs" / "architecture.md").read_text()
    folders = [REPO / f for f in check.packages(REPO).values()]
    for name in set(re.findall(r"`([\w/]+\.py)`", text)):
        where = [REPO / name] if "/" in name else [f / name for f in folders]
        assert any(p.exists() for p in where), name
    for folder in folders:
        assert f"{folder.name}/" in text, folder.name
