"""Pull the final answer out of a free-form completion, in the server process.

Every scan here is linear in the length of the completion (no backtracking regular
expression runs over untrusted text, and no text is scanned again per box: the boxes'
braces are matched in one pass, ``_Closes``), so a 1 MB response costs milliseconds and
the worst text at the field limit (``reward_server.worst_case``) well under a second.
What comes out is an ``Answer``: either LaTeX that states the answer (a box, a GSM8K
``####`` line, the Minerva "final answer is $x$" span) or, when the completion marks no
answer, the end of the text, which the worker hands to math-verify's own extraction (its
"answer …", last-LaTeX and last-number rules) under the pool's timeout.

Rules, first hit wins (the README states them too):
1. the last outermost non-empty ``\\boxed{}``/``\\fbox{}``, or the last "final answer is
   $x$", whichever ends later; boxes separated only by commas, semicolons, "and", "or",
   spaces or math delimiters are read together as one list of answers (the several-answers rule);
2. the last GSM8K ``#### x`` line;
3. otherwise (``auto``, ``last_number``) the last ``_TAIL_CHARS`` characters of the text go to
   math-verify: "answer: x", "answer is x", the last ``$…$`` group, the last number.
   ``marked`` skips the last-number rule; ``boxed`` stops after rule 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

ExtractMode = Literal["auto", "boxed", "marked", "last_number"]
AnswerKind = Literal["latex", "text", "marked"]

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_MAX_BOXES = 8  # boxes read back from the end; unmatched \boxed{ repeated must stay linear
_MAX_GROUP = 6  # several answers in one list: as many as math-verify joins
_TAIL_CHARS = 2000  # rule 3 looks at the end of the text only
_MINERVA_TAIL = 4000


@dataclass(frozen=True)
class Answer:
    """``items``: one answer, or several read together (the several-answers rule).

    ``kind`` "latex": each item is the LaTeX of an answer. "text": ``items[0]`` is prose
    that math-verify's extraction reads; "marked": the same without its bare-number rule."""

    items: tuple[str, ...]
    kind: AnswerKind = "latex"
    wide: tuple[str, ...] | None = None  # the boxes math-verify joins; used when the
    # reference has several answers (None: same as items)

    @property
    def text(self) -> str:
        return ", ".join(self.items)


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
# One regex call holds the interpreter (no other thread, the event loop's included, runs
# meanwhile): the braces are read a slice at a time, a few milliseconds each.
_SLICE = 1 << 16
_BACKSLASHES = re.compile(r"\\*")
_GROUP_AT = re.compile(_GROUP, re.S)
_BOX_BRACE = re.compile(r"\\(?:boxed|fbox) *\{")
_SPACES = re.compile(r" *")


class _Closes:
    """Where each box's ``{`` closes, found in one pass over the text's braces from its end
    backwards: a ``{`` closes at the nearest ``}`` after it that no later ``{`` took.

    Boxes are asked for from the end of the text backwards (as ``_boxes_from_end`` finds
    them), so each brace is looked at once, whatever the boxes' number and nesting; a
    search forward from each box instead read a megabyte of braces once per box (16 boxes,
    then 8 more unboxing: tens of seconds). The braces come in tokens, so that a Python
    step covers many: a balanced stretch (``{}{x}{{y}}``, nested up to 4 deep) is one token
    that matches nothing outside it, and a run of one brace is one token."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.scanned = len(text)  # the braces at and after this index are counted
        self.box_from = len(text)  # box braces are known for commands from here on
        self.pending: list[list[int]] = []  # runs of unmatched "}": [first, end)
        self.closes: dict[int, int | None] = {}  # box "{" -> its "}" (None: never closed)

    def close(self, command_start: int, brace: int) -> int | None:
        """The ``}`` of the box whose command starts at ``command_start`` and whose ``{``
        is at ``brace``; each call's box lies before every earlier call's."""
        if brace in self.closes:
            return self.closes[brace]
        boxes = {m.end() - 1 for m in _BOX_BRACE.finditer(self.text, command_start,
                                                            self.box_from)}
        boxes.add(brace)
        runs = [m.span(2) for lo, hi in self._slices(brace, self.scanned)
                for m in _BRACE_TOKEN.finditer(self.text, lo, hi) if m.start(2) >= 0]
        for start, end in reversed(runs):
            if self.text[start] == "}":
                self.pending.append([start, end])
                continue
            last = self._take(end - start)  # what the run's first "{" closes with
            if start in boxes:
                self.closes[start] = last
                boxes.discard(start)
        for box in boxes:  # in a balanced token: its own group, which ends inside it
            group = _GROUP_AT.match(self.text, box)
            if group is not None:
                self.closes[box] = group.end() - 1
        self.scanned, self.box_from = brace, command_start
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


@dataclass(frozen=True)
class _Box:
    start: int
    end: int  # one past the closing brace
    content: str


class _LastCommand:
    """The last box command before an index, each command's text searched once."""

    def __init__(self, text: str, lo: int = 0) -> None:
        self.text, self.lo = text, lo
        self.found: dict[str, int] = {}

    def before(self, end: int) -> tuple[int, str]:
        for cmd in _BOX_COMMANDS:
            at = self.found.get(cmd)
            if at is None or at + len(cmd) > end:  # the earlier answer lies past end
                self.found[cmd] = self.text.rfind(cmd, self.lo, end) if at != -1 else -1
        return max((self.found[cmd], cmd) for cmd in _BOX_COMMANDS)


def _boxes_from_end(text: str) -> tuple[list[_Box], bool]:
    """Up to ``_MAX_BOXES`` outermost non-empty boxes, last first; and whether a box was
    cut off (unclosed). A box inside a box is part of the outer one's content, never an
    answer of its own; an empty box (``\\boxed{}`` echoed from the prompt) is skipped."""
    found: list[_Box] = []
    cut_off = False
    end = len(text)
    closes = _Closes(text)
    commands = _LastCommand(text)
    for _ in range(_MAX_BOXES * 2):
        if len(found) >= _MAX_BOXES:
            break
        start, command = commands.before(end)
        if start < 0:
            break
        i = _SPACES.match(text, start + len(command)).end()
        if i < len(text) and text[i] == "{":
            close = closes.close(start, i)
            if close is None:
                cut_off = True
            else:
                while found and found[-1].start < close:  # nested in this one
                    found.pop()
                content = _unbox(text, i + 1, close, closes).strip()
                if content:
                    found.append(_Box(start, close + 1, content))
        elif command == "\\boxed" and i > start + len(command):
            # "\boxed 5": TeX takes the next token as the argument
            token = re.match(r"[^\s$]+", text[i : i + 200])
            if token:
                found.append(_Box(start, i + token.end(), token.group(0)))
        else:
            cut_off = True
        end = start
    return found, cut_off


def _unbox(text: str, lo: int, hi: int, closes: _Closes) -> str:
    """``text[lo:hi]`` (a box's content) with up to ``_MAX_BOXES`` box commands inside it
    removed, the last first (their contents kept); it stops at a command with no braced
    argument. The inner boxes' braces were matched when their outer box was."""
    cut: list[tuple[int, int]] = []  # spans of the text left out
    commands = _LastCommand(text, lo)
    end = hi
    for _ in range(_MAX_BOXES):
        start, command = commands.before(end)
        if start < 0:
            break
        i = _SPACES.match(text, start + len(command), hi).end()
        close = closes.closes.get(i) if i < hi and text[i] == "{" else None
        if close is None or close >= hi:
            break
        cut += [(start, i + 1), (close, close + 1)]
        end = start
    if not cut:
        return text[lo:hi]
    pieces, at = [], lo
    for start, stop in sorted(cut):
        pieces.append(text[at:start])
        at = stop
    pieces.append(text[at:hi])
    return "".join(pieces)


# Between two boxes of one list: only separators (math-verify's ", and or" plus spacing,
# math delimiters and \text{and}).
_SEPARATORS = re.compile(
    r"(?:\s|[,;.$&]|\\[,;:! ]|\\q?quad|\\[()\[\]]|\\text\s*\{\s*(?:and|or|,)?\s*\}|and|or)*"
)


_WIDE_SEPARATOR = re.compile(r"\b(?:and|or)\b|,|;")


def _box_group(text: str, boxes: list[_Box], wide: bool = False) -> tuple[str, ...]:
    """The last box and the boxes before it that only separators divide from it.

    ``wide``: math-verify's rule instead (latex2sympy2_extended's extract_boxed_content):
    fewer than 10 characters between, or fewer than 70 with "and", "or", "," or ";"."""
    group = [boxes[0]]
    for box in boxes[1:_MAX_GROUP]:
        between = text[box.end : group[-1].start]
        if wide:
            joined = len(between) < 10 or (
                len(between) < 70 and box.content != group[-1].content
                and _WIDE_SEPARATOR.search(between) is not None
            )
        else:
            joined = len(between) <= 80 and _SEPARATORS.fullmatch(between) is not None
        if not joined:
            break
        group.append(box)
    items: list[str] = []
    for box in reversed(group):
        if box.content and (not items or items[-1] != box.content):
            items.append(box.content)
    return tuple(items)


_MINERVA = re.compile(r"final answer is\s*:?\s*", re.IGNORECASE)
_ANOTHER_SPAN = re.compile(r"\s*(?:,|;|\band\b|\bor\b)\s*(?:\$|\\\(|\\\[)")


def _minerva(text: str) -> tuple[int, int, str] | None:
    """``(start, end, latex)`` of the last "final answer is $x$" (Minerva's format)."""
    offset = max(0, len(text) - _MINERVA_TAIL)
    last = None
    for last in _MINERVA.finditer(text, offset):  # noqa: B007 - we want the last one
        pass
    if last is None:
        return None
    rest = text[last.end() : last.end() + 1000]
    for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if rest.startswith(opener):
            close = rest.find(closer, len(opener))
            while close > 0 and rest[close - 1] == "\\":  # "\$72" is a dollar sign
                close = rest.find(closer, close + 1)
            if close > len(opener):
                if _ANOTHER_SPAN.match(rest, close + len(closer)):
                    return None  # "$3$ or $4$": a list, which math-verify's reading joins
                span = rest[len(opener) : close].strip()
                return last.end(), last.end() + close + len(closer), span
            return None
    return None


def _last_hashes(text: str) -> str | None:
    start = text.rfind("####")
    if start < 0:
        return None
    line = text[start + 4 :].lstrip("# ").split("\n", 1)[0].strip()
    return line or None


def _tail(text: str) -> str:
    """The end of the text, cut at a line start so that no math span is cut in half."""
    if len(text) <= _TAIL_CHARS:
        return text
    tail = text[-_TAIL_CHARS:]
    newline = tail.find("\n")
    return tail[newline + 1 :] if 0 <= newline < _TAIL_CHARS // 2 else tail


_UNICODE = {"½": "\\frac{1}{2}", "⅓": "\\frac{1}{3}", "⅔": "\\frac{2}{3}", "¼": "\\frac{1}{4}",
            "¾": "\\frac{3}{4}", "∞": "\\infty", "π": "\\pi", "−": "-", "×": "\\times",
            "·": "\\cdot", "²": "^{2}", "³": "^{3}", "≤": "\\le ", "≥": "\\ge ", "≠": "\\neq "}
_UNICODE_RE = re.compile("|".join(_UNICODE))
_ROOT = re.compile(r"√\s*(\d+|[a-zA-Z]|\([^()]*\))")


def unicode_math(text: str) -> str:
    """``½``, ``√2``, ``∞``, ``x²``, ``−3`` as LaTeX, which the parser reads (it reads none of
    them). Only characters with one LaTeX spelling; ASCII text is returned as is."""
    if text.isascii():
        return text
    text = _ROOT.sub(lambda m: "\\sqrt{" + m.group(1).strip("()") + "}", text)
    return _UNICODE_RE.sub(lambda m: _UNICODE[m.group()], text)


def extract_answer(response: str, mode: ExtractMode = "auto", **rules: Any) -> Answer | None:
    """The final answer ``response`` commits to, or None when it commits to none (see
    ``commit.committed_answer``, which says why, and takes the same ``rules``)."""
    from reward_server.verifiers.math.commit import committed_answer  # it builds on this module

    answer = committed_answer(response, mode, **rules)
    return answer if isinstance(answer, Answer) else None


def with_unicode_math(answer: Answer) -> Answer:
    """``answer`` with its Unicode math as LaTeX (``unicode_math``)."""
    if answer.text.isascii():
        return answer
    wide = tuple(unicode_math(i) for i in answer.wide) if answer.wide else None
    return Answer(tuple(unicode_math(i) for i in answer.items), answer.kind, wide)


def last_box_open(text: str, boxes: list[_Box]) -> bool:
    """Whether a box command after the last closed box never closes (``\\boxed{5} … so
    \\boxed{6``): the answer was being rewritten when the text was cut off. An empty box
    echoed from the prompt is no answer, open or not."""
    end = boxes[0].end if boxes else 0
    last = max(text.rfind(cmd) for cmd in _BOX_COMMANDS)
    return last >= end and _EMPTY_BOX.match(text, last) is None


_EMPTY_BOX = re.compile(r"\\(?:boxed|fbox) *\{\s*\}")


_ONE_SPAN = re.compile(r"\$\$?([^$]+)\$\$?")
_MATH_DOLLAR = re.compile(r"(?<!\\)\$")  # "\$18.90" is a dollar sign, not a math span
# "answer" in prose marks a worked solution; "\text{No answer}" alone is a text answer
_TEXT_ONLY = re.compile(r"\\(?:text|textbf|mathrm)\s*\{[^{}$]*\}")


def extract_gold(answer: str) -> Answer:
    """The reference answer: bare LaTeX, or text a dataset stored (boxed, after ``####``,
    a whole worked solution). Bare references are LaTeX; anything with a box, a math
    delimiter (not an escaped ``\\$``) or "answer" in it (unless it is one ``\\text{}``) is
    read by math-verify's extraction."""
    stripped = answer.strip()
    inline = _ONE_SPAN.fullmatch(stripped)
    if inline:  # "$\\frac{1}{2}$": one math span and nothing else is bare LaTeX
        stripped = inline.group(1).strip()
    hashes = _last_hashes(stripped)
    if hashes is not None and "\\boxed" not in stripped:
        return Answer((hashes,))
    marked = any(m in stripped for m in ("\\boxed", "\\fbox", "\\(", "\\[")) or (
        _MATH_DOLLAR.search(stripped) is not None
        or ("answer" in stripped.lower() and not _TEXT_ONLY.fullmatch(stripped))
    )
    return Answer((unicode_math(stripped),), kind="text" if marked else "latex")
