"""The language table: how to compile and run a program, as data. A new language is one row
here (plus its compiler or interpreter in the image) and one row in the parametrised test
(``tests/sandbox/test_languages.py``).

Every language runs under the same protections (uid 10001, read-only root, the work dir as
``HOME``, seccomp, the pids and memory limits of the container). What differs is how the
item's ``memory_mb`` reaches the program: C, C++, Rust and Python get an address-space cap
(``RLIMIT_AS``); the JVM, Go, V8 and rustc reserve address space they never touch, so they
get a cap on writable memory (``RLIMIT_DATA``) instead, with the runtime's own heap limit set
to ``memory_mb`` and ``memory_overhead_mb`` more for the runtime itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MEMORY_MB = "{memory_mb}"  # in a command: the item's memory limit in MB


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    source: str  # file name the program is written to in the work dir
    run: tuple[str, ...]  # command for each test, in the work dir
    compile: tuple[str, ...] | None = None  # command run once before the tests
    aliases: tuple[str, ...] = ()  # other names an item may give (lower case)
    supports_assertions: bool = False  # test_code/entry_point style (Python only)
    # stderr markers of a program that did not compile (interpreted languages): the
    # execution stops at the first test and reports syntax_error
    syntax_error_markers: tuple[str, ...] = ()
    # run each test in a fork of a warm interpreter instead of ``run`` (Python: ~1 ms
    # instead of ~25 ms per test); the harness falls back to ``run`` if it cannot
    forkserver: bool = False
    # "as": memory_mb caps the address space; "data": it caps writable memory
    # (RLIMIT_DATA), plus memory_overhead_mb, for runtimes that reserve address space
    memory_rlimit: Literal["as", "data"] = "as"
    memory_overhead_mb: int = 0
    compile_memory_rlimit: Literal["as", "data"] | None = None  # the compiler's, if not that
    # stderr text of a program that ran out of memory (beyond the harness's own list)
    memory_markers: tuple[str, ...] = ()

    def as_job(self, memory_mb: int = 256) -> dict:
        """The harness's view of this row, with ``{memory_mb}`` filled in."""
        def fill(argv: tuple[str, ...]) -> list[str]:
            return [a.replace(MEMORY_MB, str(memory_mb)) for a in argv]

        return {"source": self.source, "run": fill(self.run), "forkserver": self.forkserver,
                "compile": fill(self.compile) if self.compile else None,
                "memory_rlimit": self.memory_rlimit,
                "memory_overhead_mb": self.memory_overhead_mb,
                "compile_memory_rlimit": self.compile_memory_rlimit,
                "memory_markers": list(self.memory_markers)}


# The JVM: one GC thread (SerialGC), no perf-data file (/tmp is read-only), the heap capped
# at the item's limit; 8 MB thread stacks as C's main stack has (every Java thread gets one,
# and ~9 start with the JVM: their stacks count against RLIMIT_DATA, so not Codeforces' 64)
_JAVA = ("java", "-XX:+UseSerialGC", "-XX:-UsePerfData", "-Xss8m", "-Xms8m",
         f"-Xmx{MEMORY_MB}m", "@java.args")

LANGUAGES: dict[str, LanguageSpec] = {
    spec.name: spec
    for spec in (
        LanguageSpec(
            name="python", source="main.py", run=("python3", "-I", "main.py"),
            aliases=("py", "python3"), supports_assertions=True,
            syntax_error_markers=("SyntaxError:", "IndentationError:", "TabError:"),
            forkserver=True,
        ),
        LanguageSpec(
            name="cpp", source="main.cpp", run=("./main",), aliases=("c++", "cxx"),
            compile=("g++", "-std=c++17", "-O2", "-pipe", "-o", "main", "main.cpp"),
        ),
        LanguageSpec(
            name="c", source="main.c", run=("./main",),
            compile=("gcc", "-std=gnu17", "-O2", "-pipe", "-o", "main", "main.c", "-lm"),
        ),
        LanguageSpec(
            name="java", source="Main.java", run=_JAVA,
            compile=("python3", "-I", "/opt/toolchains/java_build.py"),
            memory_rlimit="data", memory_overhead_mb=192,
            memory_markers=("java.lang.OutOfMemoryError",
                            "insufficient memory for the Java Runtime"),
        ),
        LanguageSpec(
            name="javascript", source="main.js", aliases=("js", "node", "nodejs"),
            # a syntax error is found before the tests, with its message as the detail
            compile=("node", "--check", "main.js"),
            run=("node", f"--max-old-space-size={MEMORY_MB}", "main.js"),
            memory_rlimit="data", memory_overhead_mb=128,
            memory_markers=("JavaScript heap out of memory", "Array buffer allocation failed"),
        ),
        LanguageSpec(
            name="go", source="main.go", run=("./main",), aliases=("golang",),
            # no symbol table: 1.3 MB instead of 2.0 MB to share (panics still name functions)
            compile=("go", "build", "-ldflags=-s -w", "-o", "main", "main.go"),
            memory_rlimit="data", memory_overhead_mb=64,
            memory_markers=("runtime: out of memory",),
        ),
        LanguageSpec(
            name="rust", source="main.rs", run=("./main",), aliases=("rs",),
            # no symbols: 0.3 MB instead of 11.6 MB to share (sandbox/builds.py)
            compile=("rustc", "--edition", "2021", "-O", "-C", "strip=symbols", "-o", "main",
                     "main.rs"),
            # rustc's codegen threads each reserve a 64 MB malloc arena: under an address-space
            # cap a busy compile's thread failed to start (an internal compiler error, a
            # correct program's compile_error); reservations do not count as writable memory.
            # The program keeps the address-space cap, which gVisor enforces (RLIMIT_DATA: not)
            compile_memory_rlimit="data",
            memory_markers=("memory allocation of",),
        ),
    )
}
_BY_NAME = {alias: spec for spec in LANGUAGES.values() for alias in (spec.name, *spec.aliases)}


def resolve(name: str) -> LanguageSpec | None:
    """The row for a language name or alias (any case), or None."""
    return _BY_NAME.get(name.strip().lower())


def known_names() -> str:
    """Every accepted name, for an error message: ``cpp (c++, cxx), c, ...``."""
    return ", ".join(f"{s.name} ({', '.join(s.aliases)})" if s.aliases else s.name
                     for s in LANGUAGES.values())
