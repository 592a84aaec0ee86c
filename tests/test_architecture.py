"""The package's shape, read from the source (AST, no imports; sub-second): no import cycles,
no package importing another's `_private` names, and no result path written outside
`kvspec.plan.paths` (the rule files take every path from it)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import REPO

SRC = REPO / "src"


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `root` (a src directory)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _runtime_imports(tree: ast.AST) -> Iterator[ast.ImportFrom | ast.Import]:
    """Every import statement except those under `if TYPE_CHECKING:` (not run)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skip:
            yield node


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of its package it imports at run time (function-level too)."""
    mods = modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            targets = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                for a in node.names
            ]  # fmt: skip
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def private_imports(root: Path) -> list[str]:
    """`from a.x import _y` where `a.x` lies in another subpackage than the importer."""
    bad = []
    for name, path in modules(root).items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            if node.module.split(".")[:2] == name.split(".")[:2]:
                continue
            bad += [f"{name} imports {node.module}.{a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]  # fmt: skip
    return bad


PATH_LITERAL = re.compile(r"""["'](results|logs|benchmarks|resources)/""")


def path_literals(root: Path) -> list[str]:
    """Lines of the rule files that write a path pattern instead of taking it from P."""
    return [f"{p.relative_to(root)}:{i}: {line.strip()}"
            for p in sorted(root.rglob("*.smk"))
            for i, line in enumerate(p.read_text().splitlines(), start=1)
            if PATH_LITERAL.search(line)]  # fmt: skip


def test_no_import_cycles() -> None:
    assert cycles(import_graph(SRC)) == []


def test_no_package_imports_another_packages_private_names() -> None:
    assert private_imports(SRC) == []


def test_rule_files_take_every_path_from_the_plan() -> None:
    assert path_literals(REPO / "workflow") == []


# ---- the checks catch what they look for ------------------------------------------------------
def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "k/__init__.py": "", "k/a/__init__.py": "", "k/b/__init__.py": "",
        "k/a/x.py": "from k.b.y import f\n",
        "k/b/y.py": "def f():\n    from k.a import x\n",
        "k/b/z.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from k.a import x\n",
    })  # fmt: skip
    assert cycles(import_graph(root)) == [["k.a.x", "k.b.y"]]  # the TYPE_CHECKING one is not


def test_a_private_name_across_packages_is_found(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "k/__init__.py": "", "k/a/__init__.py": "", "k/b/__init__.py": "",
        "k/a/x.py": "def _p(): ...\ndef q(): ...\n",
        "k/a/w.py": "from k.a.x import _p\n",  # same package: allowed
        "k/b/y.py": "from k.a.x import _p, q\n",
    })  # fmt: skip
    assert private_imports(root) == ["k.b.y imports k.a.x._p"]


@pytest.mark.parametrize("line", ['        "results/x/{model}.json",', "    log: 'logs/a.log'"])
def test_a_path_literal_in_a_rule_file_is_found(tmp_path: Path, line: str) -> None:
    root = _package(tmp_path, {"rules/a.smk": f"rule a:\n    output:\n{line}\n"})
    assert len(path_literals(root)) == 1
