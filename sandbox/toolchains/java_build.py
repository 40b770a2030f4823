#!/usr/bin/env python3
"""Compiles a Java solution whatever its main class is called. Runs in the sandbox as the
candidate's compile step; standard library only.

``javac`` wants a public class in a file of the same name, and ``java`` wants the name of
the class that has ``main``; datasets' Java solutions call it ``Main``, ``Solution``, ``A``,
``Codechef``, some inside a ``package``. This renames ``Main.java`` after its public
top-level class, runs ``javac``, finds the top-level class whose class file declares
``main(String[])`` (the public one first) and writes the argument file ``java.args``
(``-cp . pkg.Class``) that the run command reads as ``java @java.args``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

SOURCE = "Main.java"
ARGFILE = "java.args"
# javac is short-lived: the client compiler, one GC thread, no perf-data file (/tmp is
# read-only in the sandbox)
JAVAC = ("javac", "-J-XX:+UseSerialGC", "-J-XX:TieredStopAtLevel=1", "-J-XX:-UsePerfData",
         "-encoding", "UTF-8", "-nowarn", "-d", ".")
MAIN_DESCRIPTOR = b"([Ljava/lang/String;)V"

_NOISE = re.compile(r'"""(?:\\.|[^\\])*?"""|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
                    r"|//[^\n]*|/\*.*?\*/", re.S)
_PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_$][\w$]*(?:\s*\.\s*[A-Za-z_$][\w$]*)*)\s*;")
_TYPE = re.compile(r"\b(class|interface|enum|record)\s+([A-Za-z_$][\w$]*)")
_MODIFIERS = {"public", "final", "abstract", "strictfp", "sealed", "non-sealed", "static"}


def code_only(source: str) -> str:
    """The source with comments, strings and char literals blanked (same length)."""
    return _NOISE.sub(lambda m: " " * len(m.group()), source)


def top_level_types(source: str) -> tuple[str, list[tuple[str, bool]]]:
    """(package, [(type name, is public)]) of the types declared at brace depth 0."""
    code = code_only(source)
    package = _PACKAGE.search(code)
    depth_at = []
    depth = 0
    for ch in code:
        depth_at.append(depth)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(0, depth - 1)
    types = []
    for m in _TYPE.finditer(code):
        if depth_at[m.start()] != 0:
            continue
        before = code[:m.start()].split()
        words = []
        while before and (before[-1] in _MODIFIERS or before[-1].startswith("@")):
            words.append(before.pop())
        types.append((m.group(2), "public" in words))
    name = re.sub(r"\s+", "", package.group(1)) if package else ""
    return name, types


def main_class(package: str, types: list[tuple[str, bool]], class_dir: str) -> str | None:
    """The class to run: the public top-level type if its class file has main, else the
    first top-level type whose class file does."""
    ordered = [n for n, public in types if public] + [n for n, public in types if not public]
    for name in ordered:
        try:
            with open(os.path.join(class_dir, name + ".class"), "rb") as f:
                data = f.read()
        except OSError:
            continue
        if b"main" in data and MAIN_DESCRIPTOR in data:
            return f"{package}.{name}" if package else name
    return None


def main() -> int:
    with open(SOURCE, encoding="utf-8", errors="surrogateescape") as f:
        source = f.read()
    package, types = top_level_types(source)
    public = [n for n, is_public in types if is_public]
    path = SOURCE
    if public and public[0] + ".java" != SOURCE:
        path = public[0] + ".java"
        os.rename(SOURCE, path)
    code = subprocess.call([*JAVAC, path])
    if code != 0:
        return code
    found = main_class(package, types, os.path.join(".", *package.split(".")) if package
                       else ".")
    if found is None:
        print("error: no top-level class declares public static void main(String[])",
              file=sys.stderr)
        return 1
    with open(ARGFILE, "w") as f:
        f.write(f"-cp . {found}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
