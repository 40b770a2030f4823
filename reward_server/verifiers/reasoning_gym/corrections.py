"""Where we score stricter than the library's own ``score_answer``: each a trick the pinned
library pays, which a policy would learn (found by a red-team audit; tested in
tests/reward_server/test_reasoning_gym.py).

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
    return float(score_answer(answer, entry))


def _spell_backward(answer: str, entry: dict[str, Any]) -> float:
    expected, given = str(entry["answer"]).lower(), answer.lower()
    if given == expected:
        return 1.0
    if not expected:
        return 0.0
    matches = sum(1 for a, b in zip(expected, given, strict=False) if a == b)
    reward = Fraction(matches, len(expected))
    return float(reward - Fraction(1, 5) if reward == 1 else reward)
