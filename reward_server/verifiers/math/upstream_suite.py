"""Math-Verify's own test suite, obtained at run time (never copied into this repository). In
the package because the agreement test and ``bench/bench_math.py`` both score it.

``load_suite()`` runs ``pip download --no-binary :all: math-verify==0.9.0`` into a cache
folder, opens the sdist's ``tests/*.py`` and reads every ``@pytest.mark.parametrize`` table
whose columns include ``gold`` and ``pred``: (gold, prediction, expected) triples taken
from real NuminaMath / OpenThoughts outputs, Minerva-style answers and the library's
regression cases. The files are parsed with ``ast``, never imported or executed; the one
non-literal cell form they use (an f-string over ``math``) is evaluated with nothing but
``math`` in scope.

A row is *at defaults* when every extra column (``precision``, ``strict``,
``allow_set_relation_comp``) holds the library's default; only those rows say what a user
with default options should get, so only they count towards agreement.
"""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERSION = "0.9.0"
# math_verify.verify's defaults, and compare_strings' in the suite's test_all.py
DEFAULTS: dict[str, Any] = {"precision": 6, "strict": True, "allow_set_relation_comp": False}
CACHE = Path(os.environ.get("MATH_VERIFY_SUITE_CACHE", Path.home() / ".cache" / "vr-math-suite"))


@dataclass(frozen=True)
class SuiteCase:
    group: str  # "test_all.py::test_relations_math"
    gold: str
    pred: str
    expected: bool
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def at_defaults(self) -> bool:
        return all(DEFAULTS.get(k) == v for k, v in self.options.items())


def download_sdist(dest: Path = CACHE) -> Path:
    """The sdist tarball, downloaded once per cache folder with pip's ordinary client."""
    found = sorted(dest.glob(f"math_verify-{VERSION}.tar.gz"))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
         "--quiet", f"math-verify=={VERSION}", "-d", str(dest)],
        check=True, timeout=300,
    )
    return next(dest.glob(f"math_verify-{VERSION}.tar.gz"))


def _cell(node: ast.expr) -> Any:
    if isinstance(node, ast.JoinedStr):  # f"{math.sqrt(17):.15f}"
        code = compile(ast.Expression(node), "<suite>", "eval")
        return eval(code, {"__builtins__": {}, "math": math})  # noqa: S307 - math only
    return ast.literal_eval(node)


def _tables(source: str, filename: str) -> list[SuiteCase]:
    cases: list[SuiteCase] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize"):
                continue
            names = ast.literal_eval(dec.args[0])
            if isinstance(names, str):
                names = [n.strip() for n in names.split(",")]
            if "gold" not in names or "pred" not in names:
                continue
            assert isinstance(dec.args[1], ast.List), f"{filename}::{node.name}"
            for row in dec.args[1].elts:
                assert isinstance(row, ast.Tuple)
                values = dict(zip(names, (_cell(e) for e in row.elts), strict=True))
                expected = values.pop("expected", values.pop("result", None))
                gold, pred = values.pop("gold"), values.pop("pred")
                cases.append(SuiteCase(f"{filename}::{node.name}", gold, pred,
                                       bool(expected), values))
    return cases


def load_suite(dest: Path = CACHE) -> list[SuiteCase]:
    """Every (gold, pred, expected) row of the suite's parametrised tables, in file order."""
    cases: list[SuiteCase] = []
    with tarfile.open(download_sdist(dest)) as tar:
        members = sorted((m for m in tar.getmembers()
                          if m.isfile() and "/tests/test_" in m.name and m.name.endswith(".py")),
                         key=lambda m: m.name)
        for member in members:
            handle = tar.extractfile(member)
            assert handle is not None
            cases += _tables(handle.read().decode(), Path(member.name).name)
    return cases


if __name__ == "__main__":
    suite = load_suite()
    print(len(suite), "rows,", sum(c.at_defaults for c in suite), "at defaults")
