"""Answer extraction as a pure function: forms, precedence, the several-answers rule, and
linear time on hostile text."""

from __future__ import annotations

import time

import pytest

from reward_server.verifiers.math.extract import Answer, extract_answer, extract_gold


@pytest.mark.parametrize(
    ("response", "mode", "expected"),
    [
        ("\\boxed{\\frac{1}{2}}", "auto", Answer(("\\frac{1}{2}",))),
        ("\\fbox{3} and later \\boxed{4}", "auto", Answer(("4",), wide=("3", "4"))),
        ("\\boxed{4} and later \\fbox{3}", "auto", Answer(("3",), wide=("4", "3"))),
        ("\\boxed{\\{1, 2\\}}", "auto", Answer(("\\{1, 2\\}",))),
        ("\\boxed{\\boxed{5}}", "auto", Answer(("5",))),  # the outer box, unboxed inside
        ("\\boxed{4 \\text{ or } \\boxed{3}}", "auto", Answer(("4 \\text{ or } 3",))),
        ("Put it in \\boxed{}. The answer is 18.", "auto",
         Answer(("Put it in . The answer is 18.",), kind="text")),  # an echoed empty box
        ("$\\boxed 7$", "auto", Answer(("7",))),
        ("text\n#### 72", "auto", Answer(("72",))),
        # Minerva: the last of box and "final answer is $x$" wins
        ("\\boxed{1} ... Final Answer: The final answer is $10,455$. I hope it is correct.",
         "auto", Answer(("10,455",))),
        ("So the final answer is $\\boxed{8}$.", "auto", Answer(("8",))),
        ("The final answer is $\\$72$.", "auto", Answer(("\\$72",))),  # an escaped dollar
        ("The answer is 42.", "boxed", None),
        ("\\boxed{42}", "boxed", Answer(("42",))),
        ("\\boxed{}", "auto", None),
        ("\\boxed{42", "auto", None),  # an unclosed box: the answer was cut off
        ("   ", "auto", None),
        ("\\boxed{½ + √2 + x²}", "auto", Answer(("\\frac{1}{2} + \\sqrt{2} + x^{2}",))),
        # no marked answer: the text goes to math-verify's own extraction, in the worker
        ("I think it is 42", "auto", Answer(("I think it is 42",), kind="text")),
        ("I think it is 42", "marked", Answer(("I think it is 42",), kind="marked")),
        ("I think it is 42", "last_number", Answer(("I think it is 42",), kind="text")),
    ],
)
def test_extract(response: str, mode: str, expected: Answer | None) -> None:
    assert extract_answer(response, mode) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("response", "items", "wide"),
    [
        # only separators between boxes: one list of answers
        ("\\boxed{-2} and \\boxed{1}.", ("-2", "1"), None),
        ("\\[ \\boxed{-2} \\quad \\text{and} \\quad \\boxed{1}. \\]", ("-2", "1"), None),
        ("$\\boxed{3}$, $\\boxed{4}$", ("3", "4"), None),
        ("\\boxed{5} or \\boxed{5}", ("5",), None),  # repeated: one answer
        # words between: only the last box is the answer; math-verify's wider join is
        # used only against a reference with several answers
        ("First \\boxed{1}, then correcting: \\boxed{2}", ("2",), ("1", "2")),
        ("\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}", ("(1, 1)",),
         ("(3, 3)", "(1, 1)")),
        ("\\boxed{1} is wrong; after a long detour through several pages of algebra we get \\boxed{2}",
         ("2",), None),
    ],
)
def test_several_answers_rule(response: str, items: tuple[str, ...],
                              wide: tuple[str, ...] | None) -> None:
    answer = extract_answer(response)
    assert answer is not None and answer.items == items and answer.wide == wide


@pytest.mark.parametrize(
    ("gold", "expected"),
    [
        ("42", Answer(("42",))),
        ("x = 5", Answer(("x = 5",))),
        ("steps\n#### 18", Answer(("18",))),
        ("\\boxed{7}", Answer(("\\boxed{7}",), kind="text")),
        ("$\\frac12$", Answer(("\\frac12",))),  # one math span: bare LaTeX
        ("$x$ is $2$", Answer(("$x$ is $2$",), kind="text")),
        ("Final Answer: The final answer is $28 \\%$.", Answer(
            ("Final Answer: The final answer is $28 \\%$.",), kind="text")),
        ("\\$18.90", Answer(("\\$18.90",))),  # an escaped dollar is no math delimiter
        ("\\$5 \\text{ per hour}", Answer(("\\$5 \\text{ per hour}",))),
        ("\\text{No answer}", Answer(("\\text{No answer}",))),  # a text answer, not prose
        ("The answer is 5.", Answer(("The answer is 5.",), kind="text")),
        ("5 is the answer", Answer(("5 is the answer",), kind="text")),
    ],
)
def test_extract_gold(gold: str, expected: Answer) -> None:
    assert extract_gold(gold) == expected


def test_brace_matching_skips_escaped_braces() -> None:
    assert extract_answer("\\boxed{a\\}b{c}}") == Answer(("a\\}b{c}",))
    assert extract_answer("\\boxed{{", "boxed") is None  # unbalanced: cut off


def test_text_answers_are_the_tail_of_long_responses() -> None:
    answer = extract_answer("x " * 10_000 + "\nso it is 17")
    assert answer is not None and answer.kind == "text"
    assert answer.items[0].endswith("so it is 17") and len(answer.items[0]) <= 2000


@pytest.mark.parametrize(
    "hostile",
    [
        "x" * 1_000_000 + "\\boxed{5}",
        "\\boxed{" * 100_000,
        "\\boxed{1} , " * 100_000,
        "{" * 500_000 + "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
        "$" * 1_000_000,
        "the answer is " * 70_000,
        "final answer is $" * 60_000,
        "1," * 500_000,
    ],
)
def test_extraction_is_linear_on_hostile_text(hostile: str) -> None:
    started = time.process_time()  # CPU time: the machine's load must not decide the test
    for mode in ("auto", "marked", "boxed"):
        extract_answer(hostile, mode)  # type: ignore[arg-type]
    assert time.process_time() - started < 2.0
