"""docs/architecture.md names every module of the product, one row each (#33).

A row is a table line that starts with the module's path from the repository root,
``| `producers/agent.py` | what it holds |``. The modules are every ``*.py`` of the folders
pyproject.toml maps as packages (the foundation ``gpuwarden/`` with its sub-packages, the
rooms, the composition root), package markers (``__init__.py``) aside. Helpers add modules
all the time: a module no row names, a row naming a module that is gone, or a module named
by two rows fails here with the paths to add or remove.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
ROW = re.compile(r"^\| `([\w./]+\.py)` \|", re.M)


def product_modules() -> set[str]:
    """Every module file of every package pyproject.toml maps, as a path from the repository root."""
    folders = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {path.relative_to(REPO).as_posix() for folder in folders.values()
            for path in (REPO / folder).rglob("*.py") if path.name != "__init__.py"}


def test_every_module_has_one_row_and_every_row_a_module():
    rows = Counter(ROW.findall(DOC.read_text()))
    modules = product_modules()
    assert {"gpuwarden/spool.py", "producers/agent.py", "app/cli.py", "gpuwarden/remediation/act.py"} <= modules
    missing = sorted(modules - rows.keys())
    gone = sorted(rows.keys() - modules)
    twice = sorted(m for m, n in rows.items() if n > 1)
    assert not missing, f"docs/architecture.md has no row for: {missing}"
    assert not gone, f"docs/architecture.md has rows for modules that do not exist: {gone}"
    assert not twice, f"docs/architecture.md names these modules in more than one row: {twice}"
