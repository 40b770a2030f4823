"""SandboxFusion's language names on this sandbox's table (``sandbox/languages.py``).

A snippet runs as SandboxFusion runs it, not as a graded solution: Python as ``python3 -s
main.py``, its script's directory on the path (an uploaded module imports; ``-I`` would hide
it), on the warm fork server as a script of its own (``sandbox/harness/snippet.py`` says when
a fresh interpreter runs it instead), and JavaScript
without the syntax check that the verifier runs as a compile step (SandboxFusion's ``nodejs``
has none, so a syntax error is the run's exit code 1). ``bash`` is SandboxFusion's and a row of
this table only: the verifier has no use for shell scripts."""

from __future__ import annotations

from dataclasses import replace

from sandbox.languages import LANGUAGES, LanguageSpec, resolve

_BASH = LanguageSpec(name="bash", source="main.sh", run=("bash", "main.sh"), aliases=("sh",))
RUN_CODE: dict[str, LanguageSpec] = {
    **LANGUAGES,
    "python": replace(LANGUAGES["python"], run=("python3", "-s", "main.py")),
    "javascript": replace(LANGUAGES["javascript"], compile=None),  # SandboxFusion's nodejs
    "bash": _BASH,
}


def run_code_language(name: str) -> LanguageSpec | None:
    """The row for a SandboxFusion language name or one of this sandbox's names and aliases
    (any case: SandboxFusion's ``nodejs`` is our ``javascript``'s alias); None when unknown."""
    key = name.strip().lower()
    if key in (_BASH.name, *_BASH.aliases):
        return _BASH
    spec = resolve(key)
    return None if spec is None else RUN_CODE[spec.name]


def known_languages() -> str:
    """Every accepted name, for the 4xx of an unknown one."""
    return ", ".join(f"{s.name} ({', '.join(s.aliases)})" if s.aliases else s.name
                     for s in RUN_CODE.values())
