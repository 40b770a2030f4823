"""Answer extraction as a pure function: forms, precedence, and linear time on hostile text."""

from __future__ import annotations

import time

import pytest

from reward_server.verifiers.math.extract import extract_answer, extract_gold, match_brace


@pytest.mark.parametrize(
    ("response", "mode", "expected"),
    [
        ("\\boxed{\\frac{1}{2}}", "auto", "\\frac{1}{2}"),
        ("\\boxed{a} then \\boxed{b}", "auto", "b"),
        ("\\fbox{3} and later \\boxed{4}", "auto", "4"),
        ("\\boxed{4} and later \\fbox{3}", "auto", "3"),
        ("\\boxed{\\{1, 2\\}}", "auto", "\\{1, 2\\}"),
        ("text\n#### 72", "auto", "72"),
        ("The answer is 5. Then more text.", "auto", "5"),
        ("The final answer is $x^2$.", "auto", "x^2"),
        ("We get $$\\frac{3}{5}$$", "auto", "\\frac{3}{5}"),
        ("costs \\$5 and \\$6", "auto", None),  # escaped dollars are not math delimiters
        ("just words", "auto", None),
        ("it is 12 or 13", "last_number", "13"),
        ("The answer is 5.", "boxed", None),
        ("\\boxed{\\boxed{5}}", "auto", "5"),  # the innermost box is the last one
    ],
)
def test_extract(response: str, mode: str, expected: str | None) -> None:
    assert extract_answer(response, mode) == expected  # type: ignore[arg-type]


def test_boxed_beats_other_forms() -> None:
    assert extract_answer("The answer is 3.\n#### 4\n\\boxed{5}") == "5"


@pytest.mark.parametrize(
    ("gold", "expected"),
    [("42", "42"), ("\\boxed{7}", "7"), ("steps\n#### 18", "18"), ("$\\frac12$", "\\frac12")],
)
def test_extract_gold(gold: str, expected: str) -> None:
    assert extract_gold(gold) == expected


def test_match_brace_skips_escaped_braces() -> None:
    text = "{a\\}b{c}}"
    assert match_brace(text, 0) == len(text) - 1
    assert match_brace("{{", 0) is None


@pytest.mark.parametrize(
    "hostile",
    [
        "x" * 1_000_000 + "\\boxed{5}",
        "\\boxed{" * 100_000,
        "{" * 500_000 + "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
        "$" * 1_000_000,
        "the answer is " * 70_000,
        "1," * 500_000,
    ],
)
def test_extraction_is_linear_on_hostile_text(hostile: str) -> None:
    started = time.perf_counter()
    for mode in ("auto", "last_number"):
        extract_answer(hostile, mode)  # type: ignore[arg-type]
    assert time.perf_counter() - started < 2.0
