"""The reasoning_gym verifier's answer extraction, as pure functions."""

from __future__ import annotations

import pytest

from reward_server.verifiers.reasoning_gym.answers import answer_of, last_number


@pytest.mark.parametrize(("text", "number"), [
    ("4 + 1 = 5.", "5"),             # a full stop is not a decimal point
    ("The answer is -12", "-12"),
    ("3-4", "4"),                    # a minus between digits is not the number's sign
    ("After 3 steps, 1,250 left", "1250"),
    ("half: 2.5.", "2.5"),
    ("12,34", "34"),                 # not a thousands group: two numbers
    ("no digits", None),
])
def test_last_number_is_the_number_as_written(text: str, number: str | None) -> None:
    assert last_number(text) == number


def test_last_number_reads_after_the_reasoning_only() -> None:
    assert answer_of("<think>7</think> so 8", "last_number", "strip") == "8"
    assert answer_of("<think>7 and 8", "last_number", "strip") is None  # cut off thinking
    assert answer_of("<think>7 and 8", "last_number", "keep") == "8"


def test_last_number_on_megabytes_of_digits_and_commas() -> None:
    assert last_number("1" + ",000" * 250_000 + " then 9") == "9"
    assert last_number("9" * 2_000_000) == "9" * 2_000_000
