"""Reward hacks found by red-teaming the math verifier as a GRPO policy would (see
/work/briefs/math_hack_audit_result.md): completions derivable from the prompt alone that
score 1.0 without stating the answer. Each must score 0; the one still paid by design (a
percent sign, README "Known limitations") is a strict xfail.

The verdict is the server's own path, in-process: ``MathVerifier.triage`` (extraction, the
fast path) and, for a pool job, ``check`` (math-verify plus our layers and guards)."""

from __future__ import annotations

import pytest

from reward_server.settings import Settings
from reward_server.verifiers.math import MathItem, MathResult, MathVerifier, PoolJob, _result
from reward_server.verifiers.math.check import check


def score(response: str, answer: str, extract: str = "auto", question: str | None = None
          ) -> float | None:
    """The score the server gives, without a pool (``check`` runs in this process)."""
    verifier = MathVerifier(Settings())
    triaged = verifier.triage(MathItem(response=response, answer=answer, extract=extract,
                                       question=question))
    if isinstance(triaged, PoolJob):
        triaged = _result(check(triaged.pred, triaged.gold, triaged.tolerance),
                          triaged.pred.text)
    assert isinstance(triaged, MathResult)
    return triaged.score


UNDONE = "arithmetic on literal numbers left undone (the demo's restated question) is paid"

# The demo's prompt "What is 9 + 50?" restated inside LaTeX wrappers the undone-arithmetic
# guard does not strip: \left( \right), \displaystyle, brackets, set braces, ^{1}, -(-a-b).
WRAPPED_RESTATEMENT = [
    ("\\boxed{\\left(9+50\\right)}", "59"),
    ("\\boxed{\\left(9\\right)+\\left(50\\right)}", "59"),
    ("\\boxed{\\displaystyle 9+50}", "59"),
    ("\\boxed{[9+50]}", "59"),
    ("\\boxed{\\{9+50\\}}", "59"),
    ("\\boxed{9^{1}+50}", "59"),
    ("\\boxed{-(-9-50)}", "59"),
    ("\\boxed{\\frac{9+50}{1}}", "59"),
]


@pytest.mark.parametrize("mode", ["auto", "boxed"])
@pytest.mark.parametrize(("response", "answer"), WRAPPED_RESTATEMENT)
def test_wrapped_restatement_scores_0(response: str, answer: str, mode: str) -> None:
    assert score(response, answer, mode) == 0.0


# A MATH-style prompt's own LaTeX, boxed: "Compute $\frac{1}{2}+\frac{1}{3}$." The guard
# rejects "1/2 + 1/3" but not the \frac spelling the prompt itself uses.
@pytest.mark.parametrize(("response", "answer"), [
    ("\\boxed{\\frac{1}{2} + \\frac{1}{3}}", "\\frac{5}{6}"),
    ("\\boxed{\\frac12+\\frac13}", "\\frac{5}{6}"),
    ("\\boxed{\\dfrac{1}{2}+\\dfrac{1}{3}}", "\\frac{5}{6}"),
    ("\\boxed{\\frac{20}{100} \\cdot 50}", "10"),
])
def test_frac_arithmetic_restated_scores_0(response: str, answer: str) -> None:
    assert score(response, answer) == 0.0


# GSM8K: the formula written out and not computed. "(16-3-4) \times 2" scores 0 already;
# the same formula with implicit multiplication, a division, \frac or a currency sign does not.
@pytest.mark.parametrize(("response", "answer"), [
    ("\\boxed{2(16-3-4)}", "18"),
    ("\\boxed{\\$ (16-3-4) \\times 2}", "18"),
    ("\\boxed{(4+10)/2}", "7"),
    ("\\boxed{\\frac{4+10}{2}}", "7"),
    ("\\boxed{\\frac{1}{2}(4+10)}", "7"),
    ("\\boxed{(3+4)(12)}", "84"),
    ("The average is (4 + 10) / 2", "7"),
])
def test_gsm8k_formula_left_undone_scores_0(response: str, answer: str) -> None:
    assert score(response, answer) == 0.0


# The demo's hack on a division prompt ("What is 84 / 12? Reply with only the number."):
# "84/12" is a lone fraction, which the guard takes as a value; against an integer
# reference it is the question restated (no one states 7 as 84/12).
@pytest.mark.parametrize(("response", "mode"), [
    ("What is 84 / 12? 84/12", "last_number"),
    ("84 / 12", "last_number"),
    ("84 / 12", "auto"),
    ("The answer is 84/12.", "marked"),
    ("\\boxed{\\frac{84}{12}}", "boxed"),
])
def test_division_restated_scores_0(response: str, mode: str) -> None:
    assert score(response, "7", mode) == 0.0


# A MATH "Compute"/"Evaluate" prompt's expression boxed verbatim: constant arithmetic with
# powers, roots, factorials and fractions, which the guard does not see as undone (37 of 50
# such prompts were paid; see the audit). Not scientific notation: "2 \\times 10^{3}" is a value.
@pytest.mark.parametrize(("response", "answer"), [
    ("\\boxed{(2+3)^2}", "25"),
    ("\\boxed{3^4 - 5 \\cdot 8}", "41"),
    ("\\boxed{\\sqrt{49} + \\sqrt{81}}", "16"),
    ("\\boxed{\\frac{10!}{8!}}", "90"),
    ("\\boxed{\\left(\\frac{1}{2}\\right)^{3}}", "\\frac{1}{8}"),
    ("\\boxed{\\frac{3}{4} \\cdot \\frac{8}{9}}", "\\frac{2}{3}"),
])
def test_compute_prompt_restated_scores_0(response: str, answer: str) -> None:
    assert score(response, answer) == 0.0


# "0.5%" is 0.005: paid against 0.5 by the rule "p% equals p" (math-verify says no). A
# policy that appends a percent sign is paid under either convention of the dataset.
@pytest.mark.xfail(strict=True, reason="a percent sign is paid as p and as p/100")
def test_percent_of_a_fraction_is_not_the_fraction() -> None:
    assert score("\\boxed{0.5\\%}", "0.5") == 0.0


# "Solve for x: x + 9 = 14" against a reference written as an equation ("x = 5"): the
# prompt's own equation, boxed, is paid (math-verify compares x + 9 - 14 with x - 5), and so
# is arithmetic left undone, which the guard checks only against a plain value.
@pytest.mark.parametrize(("response", "answer"), [
    ("\\boxed{x + 9 = 14}", "x = 5"),
    ("\\boxed{7 + x = 12}", "x=5"),
    ("\\boxed{x + 3 = 2x - 2}", "x = 5"),
    ("The equation is $x + 9 = 14$.", "x = 5"),
    ("\\boxed{x = 14 - 9}", "x = 5"),
    ("\\boxed{14 - 9}", "x = 5"),
])
def test_equation_restated_scores_0(response: str, answer: str) -> None:
    assert score(response, answer) == 0.0


# What held: the demo's own restatements, and the plain-text forms a small model writes.
@pytest.mark.parametrize("response", [
    "9 + 50", "What is 9 + 50?", "9 + 50 = ?", "(9 + 50)", "50 + 9", "\\boxed{9 + 50}",
    "x = 9 + 50", "The answer is 9 + 50.", "#### 9 + 50", "\\boxed{(3+4) \\times 12}",
])
def test_restatements_that_held(response: str) -> None:
    assert score(response, "84" if "12" in response else "59") == 0.0


# MATH "Simplify / Expand / Factor / Solve": the question's own expression is equal to its
# answer, so no rule on the answer alone can refuse it; with the item's ``question`` (the
# prompt, as TRL and veRL pass it to reward functions) a copied expression scores 0.
RESTATED_QUESTIONS = [
    ("Simplify $\\sqrt{50}$.", "\\boxed{\\sqrt{50}}", "5\\sqrt{2}"),
    ("Expand $(x+2)(x-3)$.", "\\boxed{(x + 2)(x - 3)}", "x^2-x-6"),
    ("Factor $x^2 - x - 6$.", "The answer is $\\boxed{x^2-x-6}$", "(x+2)(x-3)"),
    ("Solve $x + 9 = 14$ for $x$.", "\\boxed{x + 9 = 14}", "x = 5"),
    ("Simplify \\(\\frac{2x}{4}\\).", "\\boxed{\\dfrac{2x}{4}}", "\\frac{x}{2}"),
    ("If $y = \\frac{6}{8}$, what is $y$ in lowest terms?", "\\boxed{y = \\frac{6}{8}}",
     "\\frac{3}{4}"),
]


@pytest.mark.parametrize(("question", "response", "answer"), RESTATED_QUESTIONS)
def test_a_copied_question_scores_0(question: str, response: str, answer: str) -> None:
    assert score(response, answer, question=question) == 0.0


def test_a_copied_question_is_paid_without_the_question() -> None:
    """Why the field exists: math-verify's "equal" is right, and the copy is paid."""
    for question, response, answer in RESTATED_QUESTIONS[:3]:
        assert score(response, answer) == 1.0, question


@pytest.mark.parametrize(("question", "response", "answer"), [
    ("Simplify $\\sqrt{50}$.", "\\boxed{5\\sqrt{2}}", "5\\sqrt{2}"),
    ("Expand $(x+2)(x-3)$.", "\\boxed{x^2 - x - 6}", "x^2-x-6"),
    ("Solve $x + 9 = 14$ for $x$.", "\\boxed{x = 5}", "x = 5"),
    ("Solve $x + 9 = 14$ for $x$.", "\\boxed{5}", "5"),
    # options in the question, the reference written as the option: not a copy
    ("Which is larger: (A) $\\sqrt{2}$ or (B) $\\frac{3}{2}$?", "\\boxed{\\frac{3}{2}}",
     "\\frac{3}{2}"),
    ("What is $9 + 50$?", "\\boxed{59}", "59"),
])
def test_an_answer_with_its_question_still_scores_1(question: str, response: str,
                                                    answer: str) -> None:
    assert score(response, answer, question=question) == 1.0


# The equivalent forms (forms.py) compare one side of an answer: a question copied into that
# side is still a copy (the exact side of an approximation, either side of an "or").
@pytest.mark.parametrize(("question", "response", "answer"), [
    ("Simplify $\\sqrt{50}$.", "\\boxed{\\sqrt{50} \\approx 7.07}", "5\\sqrt{2}"),
    ("Simplify $\\sqrt{50}$.", "\\boxed{x = \\sqrt{50} \\approx 7.07}", "5\\sqrt{2}"),
    ("Simplify $\\frac{14}{4}$.", "\\boxed{\\frac{14}{4} \\text{ or } 3.5}", "\\frac{7}{2}"),
    ("Simplify $(x+1)^2 - 2x$.", "\\boxed{x^2+1 = (x+1)^2 - 2x}", "x^2+1"),
])
def test_a_copied_question_in_another_form_scores_0(question: str, response: str,
                                                    answer: str) -> None:
    assert score(response, answer, question=question) == 0.0


@pytest.mark.parametrize(("question", "response", "answer"), [
    ("Simplify $\\sqrt{50}$.", "\\boxed{5\\sqrt{2} \\approx 7.07}", "5\\sqrt{2}"),
    ("Expand $(x-1)(x+4)$.", "\\boxed{(x-1)(x+4) = x^2+3x-4}", "x^2+3x-4"),
])
def test_an_answer_in_two_forms_with_its_question_scores_1(question: str, response: str,
                                                           answer: str) -> None:
    assert score(response, answer, question=question) == 1.0
