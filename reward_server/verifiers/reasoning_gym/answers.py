"""Which part of a completion is its answer to a reasoning-gym task.

The default is reasoning-gym's own convention: its prompts (``SYSTEM_PROMPTS["default"]``)
ask for ``<answer>…</answer>``, its ``utils.extract_answer`` takes the last such span, and
its scorers expect that span's text (a board, a list, a word), which neither a last line nor
a box delimits. ``boxed``, ``last_line``, ``last_number`` and ``whole`` serve prompts that ask
otherwise; ``last_number`` is for the numeric tasks (basic_arithmetic, chain_sum, leg_counting…)
when the model states its number in prose ("4 + 1 = 5."), as GSM8K-style graders read it.

Reasoning is not an answer: only the text after the last reasoning block is read
(``reward_server.text.after_reasoning``, as the math verifier reads it: ``<think>`` and the
other formats models write), and a block that never closes (the completion was cut off
while thinking) has no answer.

Every scan here is linear in the completion (``str.find``/``rfind``): the library's own
regex, ``<answer>\\s?(.*?)\\s?</answer>`` with ``finditer``, rescans the rest of the text from
every ``<answer>`` that has no closing tag, which is quadratic on 2 MB of them.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Literal

from reward_server.text import after_reasoning

ExtractMode = Literal["answer_tag", "boxed", "last_line", "last_number", "whole"]
ThinkMode = Literal["strip", "keep"]
OPEN, CLOSE = "<answer>", "</answer>"
BOX = "\\boxed{"
_BRACE = re.compile(r"[{}]")
# a number as the tasks write theirs: a sign, digits with optional thousands commas, a
# decimal part ("3-4" ends in 4, not -4); possessive, so linear in the text
_NUMBER = re.compile(r"(?<!\d)-?\d++(?:,\d{3})*+(?:\.\d++)?+")


def _strip_one_space(span: str) -> str:
    """The regex's ``\\s?`` at each end: one whitespace character at most."""
    if span[:1].isspace():
        span = span[1:]
    if span[-1:].isspace():
        span = span[:-1]
    return span


def last_answer_tag(text: str) -> str | None:
    """What ``reasoning_gym.utils.extract_answer`` returns (the last non-overlapping
    ``<answer>…</answer>`` span, stripped), in one pass."""
    found = None
    start = text.find(OPEN)
    while start >= 0:
        end = text.find(CLOSE, start + len(OPEN))
        if end < 0:
            break  # no closing tag after this one: none after any later one either
        found = _strip_one_space(text[start + len(OPEN):end])
        start = text.find(OPEN, end + len(CLOSE))
    return None if found is None else found.strip()


def last_box(text: str) -> str | None:
    """The content of the last ``\\boxed{…}`` whose braces balance. A box that does not close
    before the next one starts can only close after that one closes, so each box is scanned
    up to the start of the one after it that failed: one pass over the text in all."""
    limit = len(text)
    start = text.rfind(BOX, 0, limit)
    while start >= 0:
        depth = 1
        for brace in _BRACE.finditer(text, start + len(BOX), limit):
            depth += 1 if brace.group() == "{" else -1
            if depth == 0:
                return text[start + len(BOX):brace.start()].strip()
        limit = start
        start = text.rfind(BOX, 0, limit)
    return None


def last_number(text: str) -> str | None:
    """The last number in ``text`` as written, thousands commas dropped ("1,250" is
    "1250", the tasks' own answers have none); a sentence's full stop is not its decimal."""
    last = deque(_NUMBER.finditer(text), maxlen=1)
    return last[0].group().replace(",", "") if last else None


def answer_of(response: str, mode: ExtractMode, think: ThinkMode) -> str | None:
    """The answer the response gives in ``mode``; None when it gives none."""
    text = after_reasoning(response) if think == "strip" else response
    if text is None:
        return None
    if mode == "answer_tag":
        return last_answer_tag(text)
    if mode == "boxed":
        return last_box(text)
    if mode == "last_number":
        return last_number(text)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if mode == "last_line":
        return lines[-1] if lines else None
    whole = text.strip()
    return whole or None
