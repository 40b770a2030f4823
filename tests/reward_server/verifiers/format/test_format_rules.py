"""The format verifier's own readings, as tables: think_answer's strict mode, the built-in
final-answer forms, where a final answer is looked for (after the reasoning, outside code),
the item schema's refusals, and the score from the rules' verdicts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reward_server.verifiers.format import rules
from reward_server.verifiers.format.evaluate import evaluate
from reward_server.verifiers.format.items import FormatItem
from reward_server.verifiers.format.patterns import search_many
from reward_server.verifiers.format.verifier import _slices

R1 = "<think>\nLet me add.\n</think>\n<answer>\n42\n</answer>"
FENCE = "```html\n<answer>\nnot this\n</answer>\n```"


@pytest.mark.parametrize(("text", "passes", "reason"), [
    (R1, True, None),
    (R1 + "\n", True, None),
    ("<think>x</think><answer>42</answer>", True, None),  # whitespace is free
    ("  <think>\n\nx\n\n</think>\n\n<answer> 42 </answer>\n\n", True, None),
    ("<think>\n\n</think>\n<answer>\n42\n</answer>", True, None),  # thinking switched off
    (f"<think>\nAn example:\n{FENCE}\n</think>\n<answer>\n42\n</answer>", True, None),
    ("<think>\n\n</think>\n<answer>\n \n</answer>", False, "the answer is empty"),
    (R1 + "\nAnd more text after.", False, "text after </answer>"),
    ("Sure! " + R1, False, "text before <think>"),
    ("<think>x</think> so <answer>42</answer>", False, "text between </think> and <answer>"),
    ("<think>\nx\n</think>\n<answer>\n1\n</answer>\n<answer>\n2\n</answer>", False,
     "<answer> appears more than once"),
    ("<think>\nouter <think>\ninner\n</think>\n</think>\n<answer>\n42\n</answer>", False,
     "<think> appears more than once"),
    ("<think>\nStill thinking when the tokens ran out", False,
     "no </think> (cut off while thinking?)"),
    ("<answer>42</answer><think>x</think>", False,
     "the tags are not in the order <think>, </think>, <answer>, </answer>"),
    (f"<think>\nx\n</think>\n<answer>\n42\n</answer>\n{FENCE[:-3]}", True, None),  # open fence
    ("<think>\nx\n```\n</think>\n<answer>\n42\n</answer>", False,  # the fence never closes
     "no </think> (cut off while thinking?)"),
])
def test_think_answer_strict(text: str, passes: bool, reason: str | None) -> None:
    outcome = rules.think_answer_strict(text)
    assert (outcome.score == 1.0, outcome.reason) == (passes, reason)


@pytest.mark.parametrize(("form", "text", "match", "reason"), [
    ("boxed", "So the sum is \\boxed{42}.", "\\boxed{42}", None),
    ("boxed", "First \\boxed{1}, then \\boxed{\\frac{1}{2}}", "\\boxed{\\frac{1}{2}}", None),
    ("boxed", "\\fbox{7}", "\\fbox{7}", None),
    ("boxed", "\\boxed{ }", None, "the last \\boxed{} is empty"),
    ("boxed", "\\boxed{1} and then \\boxed{\\frac{1}{2}", None, "the last \\boxed{ never closes"),
    ("boxed", "The answer is 42.", None, "no \\boxed{...}"),
    ("answer_line", "Work.\nAnswer: 42", "Answer: 42", None),
    ("answer_line", "Work.\n**Final Answer:** 42\n", "**Final Answer:** 42", None),
    ("answer_line", "answer: 1\nANSWER: 2", "ANSWER: 2", None),
    ("answer_line", "The answer: 42", None, "no 'Answer: ...' line"),
    ("answer_line", "Answer:   \n", None, "no 'Answer: ...' line"),
    ("answer_tag", "<answer>1</answer> <answer> 42 </answer>", "<answer> 42 </answer>", None),
    ("answer_tag", "<answer></answer>", None, "the last <answer></answer> is empty"),
    ("answer_tag", "<answer>42", None, "no </answer>"),
    ("answer_tag", "42</answer>", None, "</answer> without an <answer> before it"),
])
def test_built_in_final_answer_forms(form: str, text: str, match: str | None,
                                     reason: str | None) -> None:
    outcome = rules.PATTERNS[form](text)
    assert (outcome.match, outcome.reason) == (match, reason)
    assert outcome.score == (1.0 if match else 0.0)


def test_built_in_forms_are_linear_on_a_megabyte_of_near_misses() -> None:
    """Texts built to make a backtracking pattern try every position; the verdicts are
    right (the bench measures the time: bench/bench_format.py)."""
    mib = 1 << 20
    assert rules.boxed("\\boxed{" + "{" * mib).reason == "the last \\boxed{ never closes"
    assert rules.answer_line(("*" * 1000 + " answer\n") * (mib // 1008)).score == 0.0
    assert rules.answer_tag("<answer>" * (mib // 8) + "</answer>").score == 0.0
    hostile = "<think>\n" + "x\n</think>\n<answer>\n" * (mib // 21)
    assert rules.think_answer_r1(hostile).score == 0.0
    assert rules.think_answer_strict(hostile).score == 0.0


def _item(response: str, *rules_: object, **options: object) -> FormatItem:
    return FormatItem.model_validate({"response": response, "rules": list(rules_), **options})


@pytest.mark.parametrize(("response", "rule", "prefix", "score", "reason"), [
    ("<think>2+2</think> So \\boxed{4}.", "final_answer", "", 1.0, None),
    # a box inside the reasoning is a draft, not the answer
    ("<think>maybe \\boxed{5}</think> I am not sure.", "final_answer", "", 0.0,
     "no \\boxed{...}"),
    ("<think>maybe \\boxed{5}", "final_answer", "", 0.0,
     "the reasoning never ends (no </think>): no final answer after it"),
    # the reasoning reopened after its close and never closed again: cut off
    ("<think>a</think> <think> \\boxed{9}", "final_answer", "", 0.0,
     "the reasoning never ends (no </think>): no final answer after it"),
    ("<think>a</think>\n```python\nprint('\\\\boxed{3}')\n```", "final_answer", "", 0.0,
     "no \\boxed{...}"),
    ("<think>a</think>\n```python\nprint('\\\\boxed{3}')\n```",
     {"rule": "final_answer", "ignore_code": False}, "", 1.0, None),
    ("<think>maybe \\boxed{5}", {"rule": "final_answer", "after_think": False}, "", 1.0, None),
    # the chat template opened <think>: the completion starts inside it
    ("Let me add.\n</think>\n<answer>\n42\n</answer>", "think_answer", "<think>\n", 1.0, None),
    ("Let me add.\n</think>\n<answer>\n42\n</answer>", "think_answer", "", 0.0,
     "does not open with '<think>\\n'"),
])
def test_where_a_final_answer_is_looked_for(response: str, rule: object, prefix: str,
                                            score: float, reason: str | None) -> None:
    result = evaluate(_item(response, rule, prefix=prefix))
    assert (result.score, result.rules[0].reason) == (score, reason)


def test_the_score_is_the_weighted_mean_or_all_or_nothing() -> None:
    cut = "<think>\nStill thinking"  # tag_count 0.25, think 0, final_answer 0
    assert evaluate(_item(cut, "tag_count", "think")).score == 0.125
    assert evaluate(_item(cut, {"rule": "tag_count", "weight": 3}, "think")).score == 0.1875
    assert evaluate(_item(cut, "tag_count", "think", all_or_nothing=True)).score == 0.0
    assert evaluate(_item(R1, "tag_count", "think_answer", all_or_nothing=True)).score == 1.0
    result = evaluate(_item(R1, "think_answer", {"rule": "final_answer", "pattern":
                                                 "answer_line"}))
    assert result.score == 0.5
    assert [(v.rule, v.passed) for v in result.rules] == [
        ("think_answer", True), ("final_answer:answer_line", False)]


def test_a_regex_rule_reports_what_it_found() -> None:
    rule = {"rule": "final_answer", "regex": r"The answer is (\d+)\.\Z", "flags": "i"}
    found = evaluate(_item("<think>x</think> THE ANSWER IS 12.", rule)).rules[0]
    assert (found.rule, found.passed, found.match) == ("final_answer:regex", True,
                                                       "THE ANSWER IS 12.")
    missed = evaluate(_item("<think>x</think> The answer is 12. Or 13.", rule)).rules[0]
    assert (missed.passed, missed.reason) == (False, "no match for the regex")
    assert search_many([("a+", "", "baaa"), ("z", "", "baaa")]) == [(1, 4), None]


@pytest.mark.parametrize(("fields", "message"), [
    ({"rules": ["nope"]}, "does not match any of the expected tags: 'think', 'think_answer', "
                          "'tag_count', 'final_answer'"),
    ({"rules": []}, "at least 1 item"),
    ({"rules": [{"rule": "final_answer", "pattern": "boxd"}]},
     "Input should be 'boxed', 'answer_line' or 'answer_tag'"),
    ({"rules": [{"rule": "final_answer", "regex": "a", "flags": "q"}]}, "unknown flags 'q'"),
    ({"rules": [{"rule": "final_answer", "regex": "a" * 1001}]}, "at most 1000"),
    ({"rules": ["think"] * 17}, "17 rules; at most 16"),
    ({"rules": [{"rule": "final_answer", "regex": "a", "pattern": "boxed"}]}, "not both"),
    ({"rules": [{"rule": "final_answer", "flags": "i"}]}, "'flags' apply to a 'regex' only"),
    ({"rules": [{"rule": "think", "weight": 0}]}, "every rule has weight 0"),
    ({"rules": [{"rule": "think", "strict": True}]}, "Extra inputs are not permitted"),
])
def test_a_bad_item_is_refused_naming_what_is_wrong(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace("*", r"\*")):
        FormatItem.model_validate({"response": "x", **fields})


def test_a_regex_that_does_not_compile_makes_its_item_invalid_naming_it() -> None:
    """Compiling is a worker's (it can take seconds): admission does not try, the verdict
    names the rule's field, and the item is null, the caller's pattern being at fault."""
    item = FormatItem.model_validate({"response": "<think>a</think> 42", "rules": [
        "think", {"rule": "final_answer", "regex": "(("}]})
    result = evaluate(item)
    assert (result.status, result.score) == ("invalid_item", None)
    assert result.detail.startswith("rules[1].regex: regex does not compile: ")
    assert [r.status for r in result.rules] == ["ok", "invalid_item"]


@pytest.mark.parametrize(("sizes", "runs"), [
    ([1500] * 256, [256]),  # a batch of ordinary completions: one hand-off
    ([600_000] * 5, [2, 2, 1]),  # long ones: about a MiB of text each
    ([2_000_000, 10], [1, 1]),  # one over the slice is a slice of its own
])
def test_a_large_request_goes_to_the_thread_in_slices_of_text(sizes: list[int],
                                                              runs: list[int]) -> None:
    batch = [_item("x" * size, "think") for size in sizes]
    pieces = _slices(batch)
    assert [len(piece) for piece in pieces] == runs
    assert [item for piece in pieces for item in piece] == batch
