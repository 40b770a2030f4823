"""A caller's own final-answer regex: checked when the item is admitted, searched in a worker.

A caller's pattern is hostile input: Python's ``re`` backtracks, and ``(a+)+$`` over 30
characters, or ``.*a.*b.*c`` over 1 MiB, holds a CPU for minutes with no nested quantifier
to reject it by. So no caller's pattern is searched in the server: searches go to a worker
process (``TimeoutPool``), whose soft limit interrupts ``re`` (its matcher checks for signals)
and whose hard limit kills the worker should that fail. The built-in patterns are ours and
linear; they run in the server.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

MAX_PATTERN_CHARS = 1000  # longer is no final-answer format; compiling stays cheap
FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}


class Search(NamedTuple):
    """One search: ``pattern`` under ``flags``, in ``text``."""

    pattern: str
    flags: str
    text: str


# (start, end) of the first match, or None
Found = tuple[int, int] | None


@lru_cache(maxsize=1024)
def compiled(pattern: str, flags: str) -> re.Pattern[str]:
    value = 0
    for flag in flags:
        value |= FLAGS[flag]
    return re.compile(pattern, value)


def check(pattern: str, flags: str) -> str | None:
    """Why ``pattern`` cannot be used (for the item's 4xx), or None."""
    if not pattern:
        return "regex is empty"
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"regex is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}"
    unknown = sorted(set(flags) - set(FLAGS))
    if unknown:
        return f"unknown flags {''.join(unknown)!r}; known: {''.join(FLAGS)}"
    try:
        compiled(pattern, flags)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"regex does not compile: {exc}"
    return None


def search_many(searches: list[Search]) -> list[Found]:
    """In a worker: each search's first match."""
    out: list[Found] = []
    for pattern, flags, text in searches:
        match = compiled(pattern, flags).search(text)
        out.append(None if match is None else match.span())
    return out


def warm_up() -> None:
    """A worker's start: nothing to load (``re`` is imported with this module)."""
