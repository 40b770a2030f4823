"""IFEval's regexes that backtrack, as linear scans that count the same matches.

The reference finds placeholders with ``\\[.*?\\]``, bullets with ``^\\s*\\*[^\\*].*$`` and
``^\\s*-.*$`` (multiline) and titles with ``<<[^\\n]+>>``. Each restarts its scan at every
position of a run that cannot match (a line of 2 MiB of ``[``, a text of newlines), quadratic
in the run: seconds to hours on the largest response the server accepts. These give the same
counts in one pass (tests/reward_server/verifiers/ifeval/test_ifeval_units.py compares them
with the regexes on random texts).
"""

from __future__ import annotations

import re

_NOT_SPACE = re.compile(r"\S")


def count_placeholders(text: str) -> int:
    """``len(re.findall(r"\\[.*?\\]", text))``: ``[`` then the nearest ``]`` on its line."""
    count, pos = 0, 0
    while (start := text.find("[", pos)) != -1:
        end_of_line = text.find("\n", start)
        close = text.find("]", start + 1, len(text) if end_of_line == -1 else end_of_line)
        if close == -1:  # no match from any '[' left on this line
            if end_of_line == -1:
                break
            pos = end_of_line + 1
            continue
        count, pos = count + 1, close + 1
    return count


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end == -1 else end


def count_bullets(text: str) -> int:
    """``re.findall(r"^\\s*\\*[^\\*].*$", text, re.M)`` plus the same for ``^\\s*-.*$``.

    From a line start, ``\\s*`` (newlines included) runs to the first non-space character,
    the same one from every line start in that run, so the run is tried once."""
    return _count_line_starts(text, star=True) + _count_line_starts(text, star=False)


def _count_line_starts(text: str, star: bool) -> int:
    count, pos, n = 0, 0, len(text)
    while pos < n:
        found = _NOT_SPACE.search(text, pos)
        if found is None:
            break
        q = found.start()
        if star and text[q] == "*" and q + 1 < n and text[q + 1] != "*":
            count += 1
            end = _line_end(text, q + 2)  # [^*] may take a newline; .* then runs one more line
        elif not star and text[q] == "-":
            count += 1
            end = _line_end(text, q + 1)
        else:
            end = _line_end(text, q)  # no match from this run: on to the next line
        pos = end + 1
    return count


def titles(text: str) -> list[str]:
    """The matches of ``<<[^\\n]+>>``: per line at most one, from its first ``<<`` to its
    last ``>>`` (greedy), with at least one character between."""
    found, pos = [], 0
    while (start := text.find("<<", pos)) != -1:
        end = _line_end(text, start)
        close = text.rfind(">>", start + 3, end)
        if close != -1:
            found.append(text[start:close + 2])
        pos = end + 1
    return found
