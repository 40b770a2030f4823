"""Where we score stricter than the library's own ``score_answer``: each a trick the pinned
library pays, which a policy would learn (found by a red-team audit; tested in
tests/reward_server/verifiers/reasoning_gym/test_reasoning_gym.py).

- countdown counts the numbers an answer uses with ``\\b\\d+\\b``, which does not see a number
  written ``309e0``: ``6*61*94*4*0e0+309e0`` uses every number and equals the target, paid 1.
  puzzle24 checks that four numbers in range make 24, never that they are the puzzle's:
  ``4*6*1*1`` is paid on every puzzle. An answer to either is read only as arithmetic over
  integer literals (the form their prompts ask for), and puzzle24's must use the puzzle's
  numbers; anything else gets what the task gives an answer it cannot parse (0.01).
- spell_backward sums ``1/n`` per matching letter in floating point and then checks the sum
  for exactly 1.0 to take 0.2 off a reversed word with junk after it; for words of 6, 7, 10,
  13-15, 19, 22-24 letters the sum misses 1.0 (0.9999999999999998) and the junk is paid in
  full. The same rule in exact fractions.
- complex_arithmetic scores ``min(1, exp(-distance))``: an answer ``nan`` (any spelling
  ``float`` reads) has a NaN distance, and ``min(1.0, nan)`` is 1.0. An answer with a NaN
  scores 0.
- game_of_life_halting compares ``bool(answer) == bool(entry["answer"])``, and both strings
  "True" and "False" are true: any answer is paid. The answer must be the entry's, as text
  (case and surrounding space aside).
- coin_flip gives a prefix of the expected decimal partial credit, divided by the *shorter*
  of the two: ``0`` is a full prefix of "0.234375" and paid 1.0 on most entries. Divided by
  the expected answer's length, as a prefix's share of it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any

UNPARSEABLE = 0.01  # what countdown and puzzle24 give an answer they cannot read
_ARITHMETIC = re.compile(r"[0-9+\-*/() \t]+")
_INTEGER = re.compile(r"[0-9]+")


def score(task: str, answer: str, entry: dict[str, Any],
          score_answer: Callable[[Any, dict[str, Any]], float]) -> float:
    """``score_answer(answer, entry)``, with the corrections above."""
    if task in ("countdown", "puzzle24"):
        if not _ARITHMETIC.fullmatch(answer.strip() or "?"):
            return UNPARSEABLE
        if task == "puzzle24":
            used = sorted(int(n) for n in _INTEGER.findall(answer))
            if used != sorted(entry.get("metadata", {}).get("numbers", ())):
                return UNPARSEABLE
    if task == "spell_backward":
        return _spell_backward(answer, entry)
    if task == "complex_arithmetic" and "nan" in answer.lower():
        return 0.0
    if task == "game_of_life_halting":
        return float(answer.strip().lower() == str(entry["answer"]).strip().lower())
    if task == "coin_flip":
        return _coin_flip(answer, entry)
    return float(score_answer(answer, entry))


def _coin_flip(answer: str, entry: dict[str, Any], tol: float = 1e-4) -> float:
    """The library's rule (within ``tol``: 1; else the matching prefix of the two written to
    10 significant digits), the prefix a share of the expected answer."""
    try:
        given = float(Fraction(answer.replace(",", "")))
        expected = float(Fraction(str(entry["answer"]).replace(",", "")))
    except (ValueError, ZeroDivisionError):
        return 0.0
    if abs(given - expected) <= tol:
        return 1.0
    given_text, expected_text = f"{given:.10g}", f"{expected:.10g}"
    prefix = 0
    for a, b in zip(given_text, expected_text, strict=False):
        if a != b:
            break
        prefix += 1
    return prefix / len(expected_text)


def _spell_backward(answer: str, entry: dict[str, Any]) -> float:
    expected, given = str(entry["answer"]).lower(), answer.lower()
    if given == expected:
        return 1.0
    if not expected:
        return 0.0
    matches = sum(1 for a, b in zip(expected, given, strict=False) if a == b)
    reward = Fraction(matches, len(expected))
    return float(reward - Fraction(1, 5) if reward == 1 else reward)
