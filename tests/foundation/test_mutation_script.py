"""scripts/mutation-check stays runnable: every mutation's text is still in its file exactly once
(the script itself runs each mutation's tests on a scratch copy, ~80 s: not in the suite)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutation_still_finds_its_text_once_and_names_tests_that_exist() -> None:
    loader = importlib.machinery.SourceFileLoader("mutation_check", str(ROOT / "scripts" / "mutation-check"))
    spec = importlib.util.spec_from_loader("mutation_check", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_check"] = module  # dataclasses look their module up
    try:
        loader.exec_module(module)
    finally:
        del sys.modules["mutation_check"]
    assert module.MUTATIONS
    for m in module.MUTATIONS:
        assert (ROOT / m.path).read_text().count(m.old) == 1, m.name
        for test in m.tests:
            path, _, name = test.partition("::")
            assert (ROOT / path).is_file(), test
            assert not name or f"def {name}(" in (ROOT / path).read_text(), test
