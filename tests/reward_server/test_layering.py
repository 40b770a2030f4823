"""The imports among ``reward_server``'s modules go one way: no two modules import each
other, directly or round a circle.

Two modules that import each other are one concept split in the wrong place (settings and
the verifiers' base class, the math verifier's extraction and its commitment rules). Every
import counts: at module level, under ``if TYPE_CHECKING:`` (a circle the type checker
walks) and inside a function (a circle the order of imports happens to tolerate). The
imports are read from the source (``ast``), so a module need not be importable here."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import reward_server

Graph = Mapping[str, Mapping[str, str]]  # module -> imported module -> how ("module", ...)


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root``, by dotted name."""
    found = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _how(parents: list[ast.AST]) -> str:
    if any(isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef) for p in parents):
        return "in a function"
    if any(isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test) for p in parents):
        return "under TYPE_CHECKING"
    return "at module level"


def _imported(node: ast.Import | ast.ImportFrom, name: str, is_package: bool,
              known: Mapping[str, Path]) -> Iterator[str]:
    """The known modules an import statement in module ``name`` names."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: from the module's package, up level - 1
            package = name.split(".") if is_package else name.split(".")[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, base] if base else package)
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                   for alias in node.names]
    for target in targets:
        while target and target not in known:  # "import a.b.c": the deepest known module
            target = target.rpartition(".")[0]
        if target and target != name:
            yield target


def import_graph(known: Mapping[str, Path]) -> dict[str, dict[str, str]]:
    """Who imports whom among ``known``, and how (at module level when any import is)."""
    graph: dict[str, dict[str, str]] = {name: {} for name in known}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        stack: list[tuple[ast.AST, list[ast.AST]]] = [(ast.parse(path.read_text()), [])]
        while stack:
            node, parents = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import | ast.ImportFrom):
                    for target in _imported(child, name, is_package, known):
                        how = _how(parents)
                        if graph[name].get(target) != "at module level":
                            graph[name][target] = how
                stack.append((child, [*parents, child]))
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.get(module, {}):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                group.append(other)
                if other == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def describe(graph: Graph, group: list[str]) -> str:
    return "\n".join(f"  {a} -> {b} ({graph[a][b]})" for a in group for b in group
                     if b in graph[a])


def test_no_import_circle_among_the_servers_modules() -> None:
    root = Path(reward_server.__file__).parent.parent
    graph = import_graph(modules(root, "reward_server"))
    assert len(graph) > 100  # the walk found the package
    found = circles(graph)
    assert not found, "import circles:\n" + "\n\n".join(describe(graph, g) for g in found)


def test_a_circle_through_type_checking_or_a_function_is_found(tmp_path: Path) -> None:
    """The walk reads every kind of import: a circle closed only under TYPE_CHECKING, or
    only in a function, is a circle."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from pkg.b import B\n")
    (package / "b.py").write_text("from .sub import c\nB = 1\n")
    (package / "sub" / "c.py").write_text("def f():\n    from .. import a\n")
    (package / "d.py").write_text("import pkg.sub.c\n")
    graph = import_graph(modules(tmp_path, "pkg"))
    assert graph["pkg.a"] == {"pkg.b": "under TYPE_CHECKING"}
    assert graph["pkg.b"] == {"pkg.sub.c": "at module level"}
    assert graph["pkg.sub.c"] == {"pkg.a": "in a function"}
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]
