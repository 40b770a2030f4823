"""Equivalence as plain functions: the fast path (``numbers``) and the worker's
``check`` (math-verify plus our layers and guards), without a server or a pool."""

from __future__ import annotations

from fractions import Fraction

import pytest

from reward_server.verifiers.math.check import check, has_several, parse_gold
from reward_server.verifiers.math.extract import Answer
from reward_server.verifiers.math.guards import (
    choice_verdict,
    hedged_words,
    letter_sequence,
    offers_several,
    option_set_verdict,
    relation_for_value,
    side_by_side,
    stated_equation,
    undone_arithmetic,
)
from reward_server.verifiers.math.numbers import (
    Number,
    fast_check,
    numbers_equal,
    parse_number,
    same_text,
)


def L(*items: str) -> Answer:
    return Answer(items)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", Number(Fraction(42))),
        ("-\\frac{3}{4}", Number(Fraction(-3, 4))),
        ("\\dfrac12", Number(Fraction(1, 2))),
        ("1,234.5", Number(Fraction(12345, 10), inexact=True)),
        ("1{,}000", Number(Fraction(1000))),
        ("1\\,000", Number(Fraction(1000))),
        ("1,22", Number(Fraction(122, 100), inexact=True)),  # a decimal comma
        ("1.5e3", Number(Fraction(1500), inexact=True)),
        ("6.02 \\times 10^{23}", Number(Fraction(602) * 10**21, inexact=True)),
        ("50\\%", Number(Fraction(50), percent=True)),
        ("\\$5", Number(Fraction(5))),
        ("12 \\text{ cm}", Number(Fraction(12))),
        ("\\text{5 apples}", Number(Fraction(5))),
        ("90^\\circ", Number(Fraction(90))),
        ("2, 3", None),  # a list
        ("\\sqrt2", None),
        ("1e99999", None),  # an exponent that would eat memory is not a number here
        ("\\rightarrow 5", None),  # \right is removed only as a whole command
        ("12 345", Number(Fraction(12345))),  # thousands groups
        ("7 7 7", None),  # several numbers, not 777
        ("0.5 5", None),
        ("2 1/2", Number(Fraction(5, 2))),  # a mixed number, not 21/2
        ("-2\\,1/2", Number(Fraction(-5, 2))),
        ("2 3/2", None),
    ],
)
def test_parse_number(text: str, expected: Number | None) -> None:
    assert parse_number(text) == expected


@pytest.mark.parametrize(
    ("gold", "pred", "tolerance", "equal"),
    [
        # a decimal alone for an exact reference: an approximation, at every digit count
        ("1/3", "0.333333", 1e-6, False),
        ("1/3", "0.3333", 1e-6, False),
        ("1/7", "0.142857", 1e-6, False),
        ("1/4", "0.25", 1e-6, True),  # exactly the value
        ("1/12", "0.0833333333333333", 1e-6, True),  # the value to double precision
        ("0.333333", "1/3", 1e-6, True),  # a decimal reference was rounded itself
        ("100", "101", 0.05, False),  # integers are exact at any tolerance
        ("100", "100.0", 0.0, True),
        ("50\\%", "0.5", 1e-6, True),
        ("50\\%", "50", 1e-6, True),
        ("0.28", "28", 1e-6, False),
        ("0", "0.0", 0.0, True),
        ("\\frac13", "0.\\overline{3}", 1e-6, True),  # a repeating decimal is exact
        ("\\frac13", "0.\\overline{33}", 0.0, True),
        ("0.34", "0.\\overline{3}", 1e-6, False),
        ("0.0", "0", 1e-6, True),
        ("1.6\\times10^{-19}", "0", 1e-6, False),  # relative only: 0 is no tiny value
        ("0.0000000005", "0", 1e-6, False),
        ("6.626\\times10^{-34}", "1\\times10^{-30}", 1e-6, False),
        ("1000000", "1000000.5", 1e-6, False),  # no tolerance against an integer
        ("123456789", "123456800.0", 1e-6, False),
        ("1000000", "1.0e6", 1e-6, True),
        ("101", "100.0", 0.05, False),
        ("101.0", "100.0", 0.05, True),
    ],
)
def test_numbers_equal(gold: str, pred: str, tolerance: float, equal: bool) -> None:
    g, p = parse_number(gold), parse_number(pred)
    assert g is not None and p is not None
    assert numbers_equal(g, p, tolerance) is equal


def test_same_text_needs_no_parser() -> None:
    assert same_text("\\left( 1, \\dfrac{1}{2} \\right)", "(1,\\frac{1}{2})")
    assert not same_text("(1, 2)", "(2, 1)")
    assert not same_text("\\rightarrow", "arrow")  # \right is removed only as a command
    verdict = fast_check(L("2 \\sqrt{2}"), L("2\\sqrt{2}"), 1e-6)
    assert verdict is not None and verdict.correct


def test_fast_path_leaves_non_numbers_to_the_worker() -> None:
    assert fast_check(L("\\sqrt{2}"), L("\\sqrt2"), 1e-6) is None
    assert fast_check(L("3"), Answer(("$3$",), kind="text"), 1e-6) is None
    assert fast_check(L("3", "4"), L("3"), 1e-6) is None
    verdict = fast_check(L("1,000"), L("1000"), 1e-6)
    assert verdict is not None and verdict.correct and verdict.status == "ok"


@pytest.mark.parametrize(
    ("pred", "gold", "correct"),
    [
        (L("2\\sqrt2"), L("\\sqrt8"), True),
        (L("(x+1)^2"), L("x^2+2x+1"), True),
        (L("\\frac{\\pi}{2}"), L("\\frac12\\pi"), True),
        (L("(2, 1)"), L("(1, 2)"), False),  # tuples keep their order
        (L("(1, 2]"), L("[1, 2)"), False),
        (L("\\{3, 2, 1\\}"), L("\\{1, 2, 3\\}"), True),
        (L("x = 3"), L("3"), True),
        (L("2x + 4 = 0"), L("x + 2 = 0"), True),  # our equation layer
        (L("2x + 4 = 0"), L("x + 3 = 0"), False),
        (L("3.14159"), L("\\pi"), False),  # an approximation alone for an exact value
        (L("3.14159"), L("3.14159265"), True),  # our tolerance layer: 1e-6 relative
        (L("3.14"), L("\\pi"), False),
        (L("\\left[\\begin{array}{cc}1 & 2 \\\\ 3 & 4\\end{array}\\right]"),
         L("\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}"), True),
        (L("(3,2)"), L("(p,q)=(3,2)"), True),
        (L("\\text{e}"), L("e"), True),
        # guards: several candidates for one answer
        (L("3 \\text{ or } 4"), L("3"), False),
        (L("\\pm 2"), L("2"), False),
        (L("3", "4"), L("4"), False),
        (L("1 + \\frac{1}{\\mathrm{e}}"), L("1 - \\frac{1}{\\mathrm{e}}"), False),
        # the several-answers rule: a list against a reference that has several
        (L("2", "1"), L("1, 2"), True),
        (Answer(("(1, 1)",), wide=("(3, 3)", "(1, 1)")), L("(3, 3), (1, 1)"), True),
        (Answer(("2",), wide=("1", "2")), L("2"), True),  # one reference answer: last box
    ],
)
def test_check(pred: Answer, gold: Answer, correct: bool) -> None:
    verdict = check(pred, gold, 1e-6)
    assert verdict.correct is correct, verdict
    assert verdict.status == "ok", verdict


@pytest.mark.parametrize(
    ("text", "gold", "correct"),
    [
        ("-5", "-5", True),
        ("The final result is 7,425,000 in total", "7425000", True),
        ("I think it is 42", "42", True),
        ("The answer is 3 or 4", "3", False),
        ("So x = 3 or x = 4.", "4", False),
        ("Adding 3 and 4 gives 7", "7", True),  # a list elsewhere in the text is no offer
    ],
)
def test_check_reads_prose_with_math_verify(text: str, gold: str, correct: bool) -> None:
    verdict = check(Answer((text,), kind="text"), L(gold), 1e-6)
    assert verdict.correct is correct, verdict


def test_statuses_are_typed() -> None:
    assert check(Answer(("no numbers at all",), kind="text"), L("42"), 1e-6).status == (
        "no_answer")
    assert check(Answer(("I think it is 42",), kind="marked"), L("42"), 1e-6).status == (
        "no_answer")
    # lists of equations and named answers are values, not a TypeError
    verdict = check(L("x = \\frac12, x = 3"), L("\\frac12, 3"), 1e-6)
    assert verdict.status == "ok" and verdict.correct
    assert check(L("V_{1}:V_{2}=11:21"), L("11:21"), 1e-6).correct


def test_several_and_offers() -> None:
    assert has_several(parse_gold(L("1, 2")))
    assert not has_several(parse_gold(L("(1, 2)")))
    assert offers_several("it is 3 or 4", "3")
    assert not offers_several("3 and 4 make 7", "7")
    assert not offers_several("it is 12345", "2")


@pytest.mark.parametrize(
    ("text", "read", "several"),
    [
        ("The answer is 3 or maybe 4.", "3", True),
        ("Answer: 3 OR 4", "3", True),
        ("The answer is 3; 4", "3", True),
        ("answer: 3 (or 4)", "3", True),
        ("The answer is 3 to 4", "3", True),
        ("The answer is 3 \\pm 4.", "3", True),
        ("The answer is 3. Or 4.", "3", True),
        ("It is 3. Or 4.", "4", True),
        # a check after the stated answer is not a list of candidates
        ("The answer is 12.\n\nCheck: the divisors of 12 are 1, 2, 3, 4, 6, 12.", "12", False),
        ("The answer is 3.\n\nLet me verify: 1+2=3, 2+2=4.", "3", False),
        ("So the answer is 5.\nDouble-check: 16 - 3 - 4 - 4 = 5, 5 eggs.", "5", False),
        ("The answer is 12, since 3 * 4 = 12.", "12", False),
    ],
)
def test_offers_several_reads_the_stated_sentence(text: str, read: str, several: bool) -> None:
    assert offers_several(text, read) is several


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ("3 = 4", False), ("x = 3 = 4", False), ("2+2=5", False), ("\\neq 3", False),
        ("\\not= 3", False), ("> 3", False), ("\\le 3", False), ("3 \\approx 4", False),
        ("3 \\lor 4", False), ("3 \\\\ 4", False), ("3 \\to 4", False), ("3 \\choose 4", False),
        ("\\cancel{3} 4", False), ("\\not 3", False),
        ("3 \\cup 4", False), ("3 | 4", False), ("3 \\in 4", False), ("3 & 4", False),
        ("3!4", False), ("x \\approx 11", True), ("|-4|", True), ("11,\\! 111", True),
        ("5!", True),
        ("x = 3", True), ("F_{n} = 5", True), ("(p, q) = (3, 2)", True), ("\\theta = 30", True), ("x_1 + x_2 = 5", True), ("|AB| = 3", True),
        ("\\left(1, 2\\right)", True), ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", True),
    ],
)
def test_relation_for_value(answer: str, value: bool) -> None:
    assert (relation_for_value(answer) is None) is value


def test_hedged_words_and_letter_sequences() -> None:
    assert hedged_words("5 \\text{ or six}", "5")
    assert hedged_words("5 \\text{ thousand}", "5")
    assert not hedged_words("3 \\times 10^{5}", "300000")  # \times is no word
    assert not hedged_words("\\text{not possible}", "\\text{not possible}")
    assert letter_sequence("\\angle BAC") == "BAC"
    assert letter_sequence("silent") == "silent"
    assert letter_sequence("ab") is None  # two lower-case letters: a product
    assert letter_sequence("2x") is None


def test_choice_verdicts() -> None:
    assert choice_verdict("\\textbf{(C)}\\ 12", False, "C") is True
    assert choice_verdict("C. 12", False, "\\text{(C)}") is True
    assert choice_verdict("C + 1", False, "C") is None  # an expression, not an option
    assert choice_verdict("The answer is (B).", True, "C") is False
    assert choice_verdict("The answer is (A) or (C).", True, "A") is False
    assert choice_verdict("The answer is (C). Then B fails.", True, "C") is True
    assert choice_verdict("\\textbf{(C)}\\ 12", False, "12") is None  # no option reference
    assert option_set_verdict("\\text{D, A, B}", "\\text{A, B, D}") is True
    assert option_set_verdict("A, B", "\\text{A, B, D}") is False
    assert option_set_verdict("1, 2", "\\text{A, B}") is None


def test_stated_equation() -> None:
    assert stated_equation("The answer is 3 = 4.", "4") == "3 =4"
    assert stated_equation("The answer is x = 4.", "4") is None  # an assignment
    assert stated_equation("The answer is 4.", "4") is None
    assert stated_equation("I got 3 = 4", "4") is None  # no answer statement


@pytest.mark.parametrize(
    ("text", "several"),
    [
        ("7 7 7", True), ("3 4 5", True), ("12 3456", True), ("0.5 5", True),
        ("2 \\quad 3", True), ("2\\;3", True), ("7~7", True), ("1 2 x", True),
        ("12 345", False), ("1\\,000", False), ("1 000 000.5", False),
        ("2 1/2", False), ("\\log_2 8", False), ("x^2 3", False), ("3 x + 4", False),
        ("\\begin{pmatrix}1 \\\\ 2\\end{pmatrix}", False), ("\\frac{1}{2} 3", False),
    ],
)
def test_side_by_side(text: str, several: bool) -> None:
    assert side_by_side(text) is several


def test_numbers_side_by_side_are_no_value() -> None:
    for gold in ("777", "21", "7"):  # 777 by their digits, 21 as math-verify parses them
        verdict = fast_check(L("7 7 7"), L(gold), 1e-6)
        assert verdict is not None and not verdict.correct, gold
        assert not check(L("7 7 7"), L(gold), 1e-6).correct, gold
    assert not same_text("7 7 7", "777")
    assert same_text("7 7 7", "7 7 7")
    prose = Answer(("The answer is 7 7 7.",), kind="text")
    assert not check(prose, L("7"), 1e-6).correct  # math-verify reads the last 7
    assert offers_several("The answer is 7 7 7.", "7")
    assert not offers_several("The answer is 12.", "12")


def test_thousands_groups_reach_math_verify_joined() -> None:
    assert check(L("1\\,000\\,000"), L("10^6"), 1e-6).correct  # its parser: 1*0*0
    assert check(Answer(("The answer is 12 345.",), kind="text"), L("12345"), 1e-6).correct


@pytest.mark.parametrize(
    ("text", "undone"),
    [
        ("9 + 50", True), ("31 + 17", True), ("(9+1)", True), ("2 \\times 3", True),
        ("x = 9 + 50", True), ("1/2 + 1/3", True), ("$12 \\cdot 4$", True), ("-3 - 4", True),
        ("9 + 50.", True), ("{9}+{50}", True), ("+9+50", True), ("9 \\, + \\, 50", True),
        ("59", False), ("-5", False), ("3/4", False), ("2 + \\sqrt{3}", False),
        ("x + 1", False), ("16 - 3 - 4 = 9", False), ("10^{6}", False), ("2e + 1", False),
    ],
)
def test_undone_arithmetic(text: str, undone: bool) -> None:
    assert undone_arithmetic(text) is undone


# What the demo's SmolLM2 wrote after 14 steps of training on math-verify's reading (greedy,
# held-out): the question restated, scored 1.0 because math-verify evaluates "9 + 50".
DEMO_HACKS = [
    ("To convert 9 + 50 to a number with only digits, you", "59"),
    ("To calculate 31 + 17, you simply add them together:", "48"),
    ("To convert 51 + 57 to a number with only the number", "108"),
]


@pytest.mark.parametrize(("text", "gold"), DEMO_HACKS)
def test_a_restated_question_is_no_answer(text: str, gold: str) -> None:
    verdict = check(Answer((text,), kind="text"), L(gold), 1e-6)
    assert not verdict.correct, verdict
    assert verdict.status == "ok"  # a wrong answer the completion chose: it scores 0


def test_undone_arithmetic_in_a_box_or_a_span() -> None:
    assert not check(L("9+50"), L("59"), 1e-6).correct
    assert not check(Answer(("so $x = 9 + 50$",), kind="text"), L("59"), 1e-6).correct
    assert check(L("9+50"), L("9+50"), 1e-6).correct  # a reference that is the sum itself
    assert check(Answer(("31 + 17 = 48",), kind="text"), L("48"), 1e-6).correct
    assert check(L("3/4"), L("0.75"), 1e-6).correct
