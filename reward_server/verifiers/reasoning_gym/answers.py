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

The ``<answer>`` span and the box are found by ``reward_server.text``, in the readings of
this library (``last_answer_tag(lazy=True)``: the spans its regex,
``<answer>\\s?(.*?)\\s?</answer>`` with ``finditer``, finds, without rescanning the rest of
the text from every ``<answer>`` that has no closing tag, quadratic on 2 MB of them;
``last_box(closed_only=True)``). Every scan is linear in the completion.
"""

from __future__ import annotations

import re
from typing import Literal

from reward_server.text import after_reasoning, last_answer_tag, last_box, last_match

ExtractMode = Literal["answer_tag", "boxed", "last_line", "last_number", "whole"]
ThinkMode = Literal["strip", "keep"]
# a number as the tasks write theirs: a sign, digits with optional thousands commas, a
# decimal part ("3-4" ends in 4, not -4); possessive, so linear in the text
_NUMBER = re.compile(r"(?<!\d)-?\d++(?:,\d{3})*+(?:\.\d++)?+")


def answer_tag(text: str) -> str | None:
    """What ``reasoning_gym.utils.extract_answer`` returns: the last of the spans its lazy
    regex finds, stripped (the one whitespace character its ``\\s?`` takes at each end is
    one the strip takes too)."""
    span = last_answer_tag(text, lazy=True)
    return None if span is None else span.content.strip()


def boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{…}`` whose braces balance, stripped."""
    box = last_box(text, ("\\boxed",), closed_only=True)
    return box.content.strip() if box else None


def last_number(text: str) -> str | None:
    """The last number in ``text`` as written, thousands commas dropped ("1,250" is
    "1250", the tasks' own answers have none); a sentence's full stop is not its decimal."""
    last = last_match(_NUMBER, text)
    return last.group().replace(",", "") if last else None


def answer_of(response: str, mode: ExtractMode, think: ThinkMode) -> str | None:
    """The answer the response gives in ``mode``; None when it gives none."""
    text = after_reasoning(response) if think == "strip" else response
    if text is None:
        return None
    if mode == "answer_tag":
        return answer_tag(text)
    if mode == "boxed":
        return boxed(text)
    if mode == "last_number":
        return last_number(text)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if mode == "last_line":
        return lines[-1] if lines else None
    whole = text.strip()
    return whole or None
