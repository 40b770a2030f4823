"""A caller's own final-answer regex: compiled and searched in a worker, never in the server.

A caller's pattern is hostile input twice over. Compiling it: ``re`` builds a character
class range by range in Python, so a 1,000-character class of distinct ranges
(``[\u0100-\uffff\u0101-\uffff…]``) takes seconds, and 16 of them held the event loop for
a minute when items were admitted. Searching it: ``re`` backtracks, and ``(a+)+$`` over 30
characters, or ``.*a.*b.*c`` over 1 MiB, holds a CPU for minutes with no nested quantifier
to reject it by. So the server only checks what costs nothing (``check``: empty, length,
flags); compiling (``compile_many``) and searching (``search_many``) go to a worker process
(``TimeoutPool``), whose soft limit interrupts ``re`` (its compiler is Python, its matcher
checks for signals) and whose hard limit kills the worker should that fail. The built-in
patterns are ours and linear; they run in the server.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

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


def check(pattern: str, max_chars: int) -> str | None:
    """Why ``pattern`` cannot be used (for the item's 4xx), or None: what is found without
    compiling it (``compile_many`` finds the rest, in a worker)."""
    if not pattern:
        return "regex is empty"
    if len(pattern) > max_chars:
        return (f"regex is {len(pattern)} characters; at most {max_chars} "
                "(REWARD_SERVER_FORMAT_MAX_PATTERN_CHARS)")
    return None


def check_flags(flags: str) -> str | None:
    unknown = sorted(set(flags) - set(FLAGS))
    return f"unknown flags {''.join(unknown)!r}; known: {''.join(FLAGS)}" if unknown else None


def compile_many(pairs: list[tuple[str, str]]) -> list[str | None]:
    """In a worker: why each (pattern, flags) does not compile, or None (compiled, cached
    for the searches that follow in this worker)."""
    out: list[str | None] = []
    for pattern, flags in pairs:
        try:
            compiled(pattern, flags)
            out.append(None)
        except (re.error, RecursionError, OverflowError, ValueError, MemoryError) as exc:
            out.append(f"regex does not compile: {exc}"[:300])
    return out


def search_many(searches: list[Search]) -> list[Found]:
    """In a worker: each search's first match (its pattern compiled by ``compile_many``)."""
    out: list[Found] = []
    for pattern, flags, text in searches:
        match = compiled(pattern, flags).search(text)
        out.append(None if match is None else match.span())
    return out


def warm_up() -> None:
    """A worker's start: nothing to load (``re`` is imported with this module)."""
