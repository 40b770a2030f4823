"""Where a box's ``{`` closes, as TeX reads braces: matched in one pass from the end.

A box's argument (``\\boxed{…}``) ends at the ``}`` that closes its ``{``; ``\\{`` is text,
``\\\\{`` a brace. A search forward from each box read a megabyte of braces once per box (16
boxes, then 8 more unboxing: tens of seconds); ``Braces`` matches them from the end of the
text backwards, as the boxes are asked for (last first), so each brace is looked at once,
whatever the boxes' number and nesting. The braces come in tokens, so that a Python step
covers many: a balanced stretch (``{}{x}{{y}}``, nested up to 4 deep) is one token that
matches nothing outside it, and a run of one brace is one token.

It pays a few microseconds a box asked for: the math verifier asks for at most 16
(``text.boxes_from_end``). A reading that goes back over every box (``text.last_box``)
counts forward instead.
"""

from __future__ import annotations

import re

# One regex call holds the interpreter (no other thread, the event loop's included, runs
# meanwhile): the braces are read a slice at a time, a few milliseconds each.
_SLICE = 1 << 16
_BACKSLASHES = re.compile(r"\\*")


def _balanced(depth: int) -> str:
    """A regex for a ``{…}`` group nested at most ``depth`` deep (escapes are text)."""
    inner = r"(?:[^{}\\]++|\\.)"
    for _ in range(depth - 1):
        inner = r"(?:[^{}\\]++|\\.|\{" + inner + r"*+\})"
    return r"\{" + inner + r"*+\}"


_GROUP = _balanced(4)
# Tokens of real braces (preceded by an even run of backslashes, as a forward scan of
# ``\\.`` tokens reads them: ``\\{`` is text, ``\\\\{`` a brace): balanced groups and the
# plain text between them, which change nothing (group 1); else a run of ``{`` or of ``}``
# (group 2). A token never ends in a backslash, so the next search starts where the
# lookbehind can see a whole run of them.
_BRACE_TOKEN = re.compile(r"(?=[\\{}])(?<!\\)(?:\\\\)*(?:("
                          + _GROUP + r"(?:" + _GROUP + r"|[^{}\\]++)*+)|(\{+|\}+))", re.S)
_GROUP_AT = re.compile(_GROUP, re.S)


class Braces:
    """Where each marked ``{`` closes: a ``{`` closes at the nearest ``}`` after it that no
    later ``{`` took.

    ``marks`` finds the braces asked about (a match ends just past its ``{``: ``\\boxed {``);
    ``close`` is asked for them from the end of the text backwards, and leaves in
    ``closes`` the ``}`` of every marked ``{`` after the one asked for (a box inside a box is
    then read without a call of its own)."""

    def __init__(self, text: str, marks: re.Pattern[str]) -> None:
        self.text = text
        self.marks = marks
        self.scanned = len(text)  # the braces at and after this index are counted
        self.marked_from = len(text)  # marked braces are known for marks from here on
        self.pending: list[list[int]] = []  # runs of unmatched "}": [first, end)
        self.closes: dict[int, int | None] = {}  # marked "{" -> its "}" (None: never closed)

    def close(self, mark_start: int, brace: int) -> int | None:
        """The ``}`` of the ``{`` at ``brace``, whose mark starts at ``mark_start``; each
        call's mark lies before every earlier call's. The ``{`` follows no ``{`` (a mark
        ends with its brace)."""
        if brace in self.closes:
            return self.closes[brace]
        marked = {m.end() - 1 for m in self.marks.finditer(self.text, mark_start,
                                                           self.marked_from)}
        marked.add(brace)
        runs = [m.span(2) for lo, hi in self._slices(brace, self.scanned)
                for m in _BRACE_TOKEN.finditer(self.text, lo, hi) if m.start(2) >= 0]
        for start, end in reversed(runs):
            if self.text[start] == "}":
                self.pending.append([start, end])
                continue
            last = self._take(end - start)  # what the run's first "{" closes with
            if start in marked:
                self.closes[start] = last
                marked.discard(start)
        for opened in marked:  # in a balanced token: its own group, which ends inside it
            group = _GROUP_AT.match(self.text, opened)
            if group is not None:
                self.closes[opened] = group.end() - 1
        self.scanned, self.marked_from = brace, mark_start
        return self.closes.get(brace)

    def _slices(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """``[lo, hi)`` cut into slices of about ``_SLICE``, each after a character that is
        no backslash (the lookbehind must see a run of them whole to tell an escaped
        brace). A token cut in two reads the same: a balanced stretch is then runs, a run
        two runs."""
        cuts = [lo]
        while hi - cuts[-1] > _SLICE:
            cut = cuts[-1] + _SLICE
            if self.text[cut - 1] == "\\":  # after the run and the character it escapes
                cut = _BACKSLASHES.match(self.text, cut).end() + 1
            if cut >= hi:
                break
            cuts.append(cut)
        return list(zip(cuts, [*cuts[1:], hi], strict=True))

    def _take(self, count: int) -> int | None:
        """Match ``count`` opening braces, innermost first; the last one's ``}``."""
        last = None
        while count and self.pending:
            run = self.pending[-1]
            taken = min(count, run[1] - run[0])
            last = run[0] + taken - 1
            run[0] += taken
            count -= taken
            if run[0] == run[1]:
                self.pending.pop()
        return None if count else last
