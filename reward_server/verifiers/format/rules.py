"""The built-in format rules as pure functions of the text: each a score in [0, 1] and the
reason it is not 1.

``think``, ``think_answer`` (not strict) and ``tag_count`` give the verdicts of the reference
functions they are named after (TRL's ``think_format_reward``, open-r1's ``format_reward``
and ``tag_count_reward``; tests compare them side by side), but every one is ``str.find``
scans that move forward: linear in the text, where open-r1's pattern backtracks over each
``</think>`` it meets (quadratic on a hostile text). ``strict`` and the final-answer patterns
are this project's readings (docs/format.md says why).
The final-answer forms are found by ``reward_server.text`` (``last_box``,
``last_answer_tag``, ``last_answer_line``), where every verifier finds its markers; what
makes one pass or fail is here.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal, NamedTuple

from reward_server.text import (
    after_reasoning,
    last_answer_line,
    last_answer_tag,
    last_box,
    printable,
    without_code,
)

BuiltIn = Literal["boxed", "answer_line", "answer_tag"]
BUILT_IN: tuple[str, ...] = ("boxed", "answer_line", "answer_tag")
MATCH_CHARS = 200  # of a match echoed back in the result


class Outcome(NamedTuple):
    score: float
    reason: str | None = None  # why it is not 1; None when it is
    match: str | None = None  # what a final-answer pattern found


def _fail(reason: str) -> Outcome:
    return Outcome(0.0, reason)


# --- think: TRL's think_format_reward -----------------------------------------------------
# r"^<think>(?!.*<think>)(.*?)</think>.*$" under DOTALL|MULTILINE: the text opens with
# <think>, holds no second one, and a </think> follows

def think(text: str) -> Outcome:
    if not text.startswith("<think>"):
        return _fail("does not open with <think>")
    again = text.find("<think>", 7)
    if again >= 0:
        return _fail(f"a second <think> at character {again}")
    if text.find("</think>", 7) < 0:
        return _fail("<think> is never closed (cut off while thinking?)")
    return Outcome(1.0)


# --- think_answer: open-r1's format_reward --------------------------------------------------
# r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$" under DOTALL|MULTILINE, read as
# finds: the earliest "\n</think>\n<answer>\n" leaves every later "\n</answer>" possible, and
# MULTILINE's $ holds at the end or before any "\n" (so lines after </answer> pass)
_MIDDLE = "\n</think>\n<answer>\n"
_CLOSE = "\n</answer>"


def think_answer_r1(text: str) -> Outcome:
    if not text.startswith("<think>\n"):
        return _fail("does not open with '<think>\\n'")
    middle = text.find(_MIDDLE, 8)
    if middle < 0:
        if text.find("</think>") < 0:
            return _fail("<think> is never closed (cut off while thinking?)")
        return _fail("no '\\n</think>\\n<answer>\\n' after the reasoning")
    close = text.find(_CLOSE, middle + len(_MIDDLE))
    while close >= 0:
        end = close + len(_CLOSE)
        if end == len(text) or text[end] == "\n":
            return Outcome(1.0)
        close = text.find(_CLOSE, close + 1)
    return _fail("no '\\n</answer>' that ends the text or a line")


# --- think_answer, strict: one block of each, any whitespace, nothing outside -------------
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def think_answer_strict(text: str) -> Outcome:
    """Any whitespace (none included) around the tags; each of the four exactly once, in
    order; nothing but whitespace before <think>, between the blocks and after </answer>; a
    non-blank answer. Tags inside fenced code or tool output are text, not structure."""
    plain = without_code(text) if "```" in text or "~~~" in text or "<" in text else text
    at: list[int] = []
    for tag in _TAGS:
        first = plain.find(tag)
        if first < 0:
            return _fail(f"no {tag}" + (" (cut off while thinking?)"
                                        if tag == "</think>" else ""))
        if plain.find(tag, first + 1) >= 0:
            return _fail(f"{tag} appears more than once")
        at.append(first)
    if at != sorted(at):
        return _fail("the tags are not in the order <think>, </think>, <answer>, </answer>")
    if plain[:at[0]].strip():
        return _fail("text before <think>")
    if plain[at[1] + len(_TAGS[1]):at[2]].strip():
        return _fail("text between </think> and <answer>")
    if plain[at[3] + len(_TAGS[3]):].strip():
        return _fail("text after </answer>")
    if not plain[at[2] + len(_TAGS[2]):at[3]].strip():
        return _fail("the answer is empty")
    return Outcome(1.0)


# --- tag_count: open-r1's tag_count_reward --------------------------------------------------
_COUNTED = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")


def tag_count(text: str) -> Outcome:
    """0.25 for each of the four newline-framed tags that appears exactly once."""
    off = [tag for tag in _COUNTED if text.count(tag) != 1]
    reason = None if not off else "not exactly once: " + ", ".join(repr(t) for t in off)
    return Outcome(0.25 * (len(_COUNTED) - len(off)), reason)


# --- final_answer: where the answer is looked for, and the built-in patterns ---------------

@lru_cache(maxsize=4)  # an item's final-answer rules read the same region: cut it once
def answer_region(text: str, after_think: bool, ignore_code: bool) -> str | None:
    """The text a final-answer pattern is searched in; None when the reasoning never ends."""
    if after_think:
        rest = after_reasoning(text)
        if rest is None:
            return None
        text = rest
    return without_code(text) if ignore_code else text


def found(text: str, start: int, end: int) -> Outcome:
    return Outcome(1.0, None, printable(text[start:end][:MATCH_CHARS]))


def boxed(text: str) -> Outcome:
    """The last ``\\boxed{`` closes (braces balanced) around a non-blank answer."""
    box = last_box(text)
    if box is None:
        return _fail("no \\boxed{...}")
    if box is False:
        return _fail("the last \\boxed{ never closes")
    if not box.content.strip():
        return _fail("the last \\boxed{} is empty")
    return found(text, box.start, box.end)


def answer_line(text: str) -> Outcome:
    """The last line that states its answer after an "Answer:" label."""
    line = last_answer_line(text)
    if line is None:
        return _fail("no 'Answer: ...' line")
    return found(text, line.start, line.end)


def answer_tag(text: str) -> Outcome:
    """The last ``<answer>…</answer>`` holds a non-blank answer."""
    span = last_answer_tag(text)
    if span is None:
        if "</answer>" in text:
            return _fail("</answer> without an <answer> before it")
        return _fail("no </answer>" if "<answer>" in text else "no <answer>...</answer>")
    if not span.content.strip():
        return _fail("the last <answer></answer> is empty")
    return found(text, span.start, span.end)


PATTERNS = {"boxed": boxed, "answer_line": answer_line, "answer_tag": answer_tag}
