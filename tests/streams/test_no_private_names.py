"""Product code reaches into no private name (``._x``) of another object: aiokafka is driven
through its public API only (issue #17), so a release of it cannot change what the workers rely
on without a failing test; and faust-streaming, with mode, is gone (issue #29).

Flagged, by reading the source with ``ast`` (no broker, nothing imported but the bases):

* ``obj._x`` whose ``obj`` is not ``self``/``cls`` nor a module of this project;
* in a class derived from an aiokafka class: ``self._x`` that the class does
  not define itself (an inherited private), and a method overriding a private of the base.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

from tests.kafka_support import REPO_ROOT

ROOTS = ("gpuwarden", "producers", "streams", "notifiers", "history", "app")
LIBRARIES = ("aiokafka",)
GONE = ("faust", "mode")
PROJECT = ("gpuwarden",)

def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class _Imports(ast.NodeVisitor):
    """Names bound to this project's modules, and to aiokafka objects."""

    def __init__(self) -> None:
        self.project: set[str] = set()
        self.library: dict[str, str] = {}  # local name -> dotted path

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            top = a.name.split(".")[0]
            local = a.asname or top
            if top in PROJECT:
                self.project.add(local)
            elif top in LIBRARIES:
                self.library[local] = a.name if a.asname else top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        top = (node.module or "").split(".")[0]
        for a in node.names:
            local = a.asname or a.name
            if node.level or top in PROJECT:
                self.project.add(local)  # a module or name of this project
            elif top in LIBRARIES:
                self.library[local] = f"{node.module}.{a.name}"


def _dotted(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        head = _dotted(expr.value)
        return None if head is None else f"{head}.{expr.attr}"
    return None


def _library_base(cls: ast.ClassDef, imports: _Imports) -> type | None:
    for base in cls.bases:
        name = _dotted(base)
        if name is None:
            continue
        head, _, rest = name.partition(".")
        if head not in imports.library:
            continue
        path = imports.library[head] + (f".{rest}" if rest else "")
        module, _, attr = path.rpartition(".")
        try:
            return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            return object  # a library base we cannot resolve: still checked for inherited privates
    return None


def findings(path: Path, rel: str) -> Iterator[str]:
    tree = ast.parse(path.read_text(), str(path))
    imports = _Imports()
    imports.visit(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in imports.project):
                continue
            yield f"{rel}: {ast.unparse(node)}"
        if isinstance(node, ast.ClassDef):
            lib = _library_base(node, imports)
            if lib is None:
                continue
            own = {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
            own |= {t.id for f in node.body if isinstance(f, (ast.Assign, ast.AnnAssign))
                    for t in (f.targets if isinstance(f, ast.Assign) else [f.target]) if isinstance(t, ast.Name)}
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self" \
                        and isinstance(sub.ctx, ast.Store):
                    own.add(sub.attr)
            for f in node.body:
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_private(f.name) \
                        and hasattr(lib, f.name):
                    yield f"{rel}: {node.name}.{f.name} overrides a private of {lib.__name__}"
            for sub in ast.walk(node):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                        and sub.value.id in ("self", "cls") and _is_private(sub.attr) and sub.attr not in own:
                    yield f"{rel}: {node.name}: {ast.unparse(sub)} (inherited from {lib.__name__})"


#: protoc's output (producers/podresources_pb2.py, from the kubelet's .proto by
#: scripts/gen-podresources) uses protobuf's internals as protobuf itself generates them: not ours
#: to write, and regenerated rather than edited.
GENERATED = "# Generated by the protocol buffer compiler.  DO NOT EDIT!"


def scan(root: Path) -> set[str]:
    found: set[str] = set()
    for top in ROOTS:
        for path in sorted((root / top).rglob("*.py")):  # a folder missing scans nothing
            if GENERATED in path.read_text(encoding="utf-8")[:2000]:
                continue
            found.update(findings(path, path.relative_to(root).as_posix()))
    return found


def test_product_code_uses_no_private_names() -> None:
    found = scan(REPO_ROOT)
    assert not found, "\n".join(sorted(found))


SAMPLE = '''
from aiokafka import AIOKafkaConsumer

class BatchConsumer(AIOKafkaConsumer):
    _seeks = 0

    async def getmany(self, *partitions, timeout_ms=0, max_records=None):
        self._seeks += 1
        fetcher = self._fetcher
        fetcher._fetch_min_bytes = 1 << 17
        return await super().getmany(*partitions, timeout_ms=timeout_ms, max_records=max_records)

    def _validate_topics(self, topics):
        return topics
'''


def test_the_scan_finds_privates_of_aiokafka_reached_into(tmp_path: Path) -> None:
    """What the faust-era batch consumer did, on aiokafka's consumer: a fetcher setting, an
    inherited private, an overridden private."""
    (tmp_path / "streams").mkdir()
    (tmp_path / "streams" / "batchconsumer.py").write_text(SAMPLE)
    for top in ROOTS:
        (tmp_path / top).mkdir(exist_ok=True)
    got = scan(tmp_path)
    assert "streams/batchconsumer.py: fetcher._fetch_min_bytes" in got
    assert "streams/batchconsumer.py: BatchConsumer._validate_topics overrides a private of AIOKafkaConsumer" in got
    assert any("self._fetcher (inherited" in g for g in got), got
    assert not any("_seeks" in g for g in got), got  # the class's own attribute


def test_no_product_module_imports_faust_or_mode_and_the_package_does_not_depend_on_them() -> None:
    import tomllib

    imports = set()
    for top in ROOTS:
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                imports |= {(path.relative_to(REPO_ROOT).as_posix(), n) for n in names if n.split(".")[0] in GONE}
    assert not imports, sorted(imports)
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    deps = [*project["dependencies"], *(d for ds in project["optional-dependencies"].values() for d in ds)]
    assert not [d for d in deps if d.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower()
                in ("faust-streaming", "faust", "mode-streaming", "mode")]
