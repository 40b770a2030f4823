"""The answer markers of a math completion, as the math verifier reads them: boxes read
together as one list of answers, Minerva's "final answer is $x$", GSM8K's ``#### x``, the
``<answer>`` span, the end of the text (for math-verify's own reading); and ``Answer``, what
extraction hands on.

Finding a marker is ``reward_server.text``'s (the last boxes, the last ``<answer>`` span,
the last match of a pattern), for every verifier alike; what the math verifier makes of
one is here. Below ``commit``, which decides which marker a completion commits to, and
``extract``, the entry points: each scan is linear in the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from reward_server.text import (
    BOX_COMMANDS,
    CLOSE_ANSWER,
    OPEN_ANSWER,
    Span,
    last_answer_tag,
    last_match,
    opens_line,
)

ExtractMode = Literal["auto", "boxed", "marked", "last_number"]
AnswerKind = Literal["latex", "text", "marked"]

_MAX_GROUP = 6  # several answers in one list: as many as math-verify joins
_TAIL_CHARS = 2000  # with no marker, only the end of the text goes to math-verify
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


# --- boxes ---------------------------------------------------------------------------------

# Between two boxes of one list: only separators (math-verify's ", and or" plus spacing,
# math delimiters and \text{and}).
_SEPARATORS = re.compile(
    r"(?:\s|[,;.$&]|\\[,;:! ]|\\q?quad|\\[()\[\]]|\\text\s*\{\s*(?:and|or|,)?\s*\}|and|or)*"
)


_WIDE_SEPARATOR = re.compile(r"\b(?:and|or)\b|,|;")


def box_group(text: str, boxes: list[Span], wide: bool = False) -> tuple[str, ...]:
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


EMPTY_BOX = re.compile(r"\\(?:boxed|fbox) *\{\s*\}")


def last_box_open(text: str, boxes: list[Span]) -> bool:
    """Whether a box command after the last closed box never closes (``\\boxed{5} … so
    \\boxed{6``): the answer was being rewritten when the text was cut off. An empty box
    echoed from the prompt is no answer, open or not."""
    end = boxes[0].end if boxes else 0
    last = max(text.rfind(cmd) for cmd in BOX_COMMANDS)
    return last >= end and EMPTY_BOX.match(text, last) is None


# --- the <answer> span ---------------------------------------------------------------------

def answer_span(text: str) -> Span | None | bool:
    """The last ``<answer>…</answer>`` (``text.last_answer_tag``); None when there is none;
    False when an ``<answer>`` that opens a line (or follows a tag) after the last close
    never closes: the answer was cut off."""
    if OPEN_ANSWER not in text:
        return None
    close = text.rfind(CLOSE_ANSWER)
    reopened = text.rfind(OPEN_ANSWER, max(close, 0))
    if reopened >= 0 and opens_line(text, reopened):
        return False
    return last_answer_tag(text)


# --- "final answer is $x$", "#### x", the end of the text ---------------------------------

_MINERVA = re.compile(r"final answer is\s*:?\s*", re.IGNORECASE)
_ANOTHER_SPAN = re.compile(r"\s*(?:,|;|\band\b|\bor\b)\s*(?:\$|\\\(|\\\[)")


def minerva(text: str) -> tuple[int, int, str] | None:
    """``(start, end, latex)`` of the last "final answer is $x$" (Minerva's format)."""
    last = last_match(_MINERVA, text, max(0, len(text) - _MINERVA_TAIL))
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


def last_hashes(text: str) -> str | None:
    """The answer of the last GSM8K ``#### x`` line; None when there is none."""
    start = text.rfind("####")
    if start < 0:
        return None
    line = text[start + 4 :].lstrip("# ").split("\n", 1)[0].strip()
    return line or None


def ending(text: str) -> str:
    """The end of the text, cut at a line start so that no math span is cut in half."""
    if len(text) <= _TAIL_CHARS:
        return text
    tail = text[-_TAIL_CHARS:]
    newline = tail.find("\n")
    return tail[newline + 1 :] if 0 <= newline < _TAIL_CHARS // 2 else tail


# --- Unicode math --------------------------------------------------------------------------

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


def with_unicode_math(answer: Answer) -> Answer:
    """``answer`` with its Unicode math as LaTeX (``unicode_math``)."""
    if answer.text.isascii():
        return answer
    wide = tuple(unicode_math(i) for i in answer.wide) if answer.wide else None
    return Answer(tuple(unicode_math(i) for i in answer.items), answer.kind, wide)
