"""The source a set of modules runs, and its digest, for provenance (``provenance.py``).

A verdict's logic may sit any number of imports away from the module that names the
verifier: the verifier's package imports a server primitive, which imports a helper. A digest
of one import level misses a change in that helper, so the set is the transitive closure:
the modules named, and every module of the given packages (this project's ``reward_server``
and ``sandbox``, a plug-in's own) that any of them imports, at module level, in a function,
or as the package a module is in (importing ``a.b.c`` runs ``a`` and ``a.b`` first). Imports
under ``if TYPE_CHECKING:`` are left out: nothing there runs. An import made from a string
(``importlib.import_module(name)``) is not seen; code that a module starts as a file (the
session kernel) is in the set only through its package's files (``package_modules``).

The source is read from the files, never imported, so the same function digests a package
tree a test builds; each module is named by its dotted name, not its path, so the same source
gives the same digest in any checkout or site-packages.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

Roots = Mapping[str, Path]  # a top-level package's directory (a lone module's file), by name


def package_roots(names: Iterable[str]) -> dict[str, Path]:
    """Where each top-level package or module of ``names`` is (its directory, or its file),
    found without importing it; a name with no source is left out."""
    roots: dict[str, Path] = {}
    for name in names:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # __main__, a module made at run time
            spec = getattr(sys.modules.get(name), "__spec__", None)
        where = list(spec.submodule_search_locations or []) if spec is not None else []
        origin = spec.origin if spec is not None else getattr(sys.modules.get(name),
                                                              "__file__", None)
        if where:
            roots[name] = Path(where[0])
        elif origin and origin.endswith(".py"):
            roots[name] = Path(origin)
    return roots


def module_file(name: str, roots: Roots) -> Path | None:
    """The source file of module ``name`` under ``roots``; None for a name that is no module
    there (another package's, or an attribute: ``from m import f``)."""
    top, _, rest = name.partition(".")
    root = roots.get(top)
    if root is None or root.suffix == ".py":
        return root if root is not None and not rest else None
    base = root.joinpath(*rest.split(".")) if rest else root
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if rest and (file := base.with_name(base.name + ".py")).is_file():
        return file
    return None


def package_modules(package: str, roots: Roots) -> list[str]:
    """Every module in ``package``'s directory, by dotted name (a module that is no package:
    itself), whether anything imports it or not."""
    file = module_file(package, roots)
    if file is None or file.name != "__init__.py":
        return [package]
    found = []
    for path in sorted(file.parent.rglob("*.py")):
        parts = path.relative_to(file.parent).with_suffix("").parts
        found.append(".".join([package, *(p for p in parts if p != "__init__")]))
    return found


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _named(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules an import statement may name, absolute (the module of a ``from m import
    x`` and ``m.x``, in case ``x`` is a submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    module = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1
        parts = package.split(".") if package else []
        parts = parts[: len(parts) - node.level + 1]
        module = ".".join([*parts, module] if module else parts)
    return [module, *(f"{module}.{alias.name}" for alias in node.names)]


@cache
def _read(name: str, file: Path, stamp: tuple[int, int]) -> tuple[bytes, tuple[str, ...]]:
    """The sha256 of a module's source and the modules it may import, read once per process
    (``stamp``: the file's mtime and size, so a file changed in place is read again)."""
    source = file.read_bytes()
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    named: list[str] = []
    stack: list[ast.AST] = [ast.parse(source)]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(node.orelse)  # the body runs only for a type checker
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            named += _named(node, package)
        stack.extend(ast.iter_child_nodes(node))
    return hashlib.sha256(source).digest(), tuple(dict.fromkeys(named))


def _module(name: str, file: Path) -> tuple[bytes, tuple[str, ...]]:
    stat = file.stat()
    return _read(name, file, (stat.st_mtime_ns, stat.st_size))


def closure(modules: Iterable[str], roots: Roots) -> dict[str, Path]:
    """``modules`` and every module under ``roots`` they import, directly or not, and the
    packages each is in: name -> file, sorted by name."""
    found: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in found or (file := module_file(name, roots)) is None:
            continue
        found[name] = file
        todo += _module(name, file)[1]
        if "." in name:
            todo.append(name.rpartition(".")[0])
    return dict(sorted(found.items()))


def source_digest(modules: Mapping[str, Path]) -> str:
    """sha256 (hex) of the modules' source, each by its dotted name and its content's
    sha256."""
    h = hashlib.sha256()
    for name, file in sorted(modules.items()):
        h.update(name.encode() + b"\0" + _module(name, file)[0] + b"\0")
    return h.hexdigest()
