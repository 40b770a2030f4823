"""The language table: how to compile and run a program, as data. A new language is one row
here (plus its compiler or interpreter in the image) and one row in the parametrised test."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    source: str  # file name the program is written to in the work dir
    run: tuple[str, ...]  # command for each test, in the work dir
    compile: tuple[str, ...] | None = None  # command run once before the tests
    supports_assertions: bool = False  # test_code/entry_point style (Python only)
    # stderr markers of a program that did not compile (interpreted languages): the
    # execution stops at the first test and reports syntax_error
    syntax_error_markers: tuple[str, ...] = ()
    # run each test in a fork of a warm interpreter instead of ``run`` (Python: ~1 ms
    # instead of ~25 ms per test); the harness falls back to ``run`` if it cannot
    forkserver: bool = False

    def as_job(self) -> dict:
        return {"source": self.source, "run": list(self.run), "forkserver": self.forkserver,
                "compile": list(self.compile) if self.compile else None}


LANGUAGES: dict[str, LanguageSpec] = {
    spec.name: spec
    for spec in (
        LanguageSpec(
            name="python", source="main.py", run=("python3", "-I", "main.py"),
            supports_assertions=True,
            syntax_error_markers=("SyntaxError:", "IndentationError:", "TabError:"),
            forkserver=True,
        ),
        LanguageSpec(
            name="cpp", source="main.cpp", run=("./main",),
            compile=("g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "main.cpp"),
        ),
    )
}
