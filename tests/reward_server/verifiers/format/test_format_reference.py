"""The format rules side by side with the functions they are named after, on responses
written for this test: TRL's ``think_format_reward`` (imported: trl is installed with the
trainer) and open-r1's ``format_reward`` and ``tag_count_reward`` (open-r1 is no package:
copied below as they stand in src/open_r1/rewards.py at commit 1416fa0c). Every verdict
must agree where our rule claims the reference's (not ``strict``)."""

from __future__ import annotations

import re

import pytest
from trl.rewards import think_format_reward

from reward_server.verifiers.format import rules


# https://github.com/huggingface/open-r1/blob/1416fa0cf21595d2083b399a2a0bbddd7f6e9563/src/open_r1/rewards.py#L85-L112
def format_reward(completions, **kwargs):
    """Reward function that checks if the reasoning process is enclosed within <think> and </think> tags, while the final answer is enclosed within <answer> and </answer> tags."""  # noqa: E501
    pattern = r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content, re.DOTALL | re.MULTILINE) for content in completion_contents]  # noqa: E501
    return [1.0 if match else 0.0 for match in matches]


def tag_count_reward(completions, **kwargs) -> list[float]:
    def count_tags(text: str) -> float:
        count = 0.0
        if text.count("<think>\n") == 1:
            count += 0.25
        if text.count("\n</think>\n") == 1:
            count += 0.25
        if text.count("\n<answer>\n") == 1:
            count += 0.25
        if text.count("\n</answer>") == 1:
            count += 0.25
        return count

    contents = [completion[0]["content"] for completion in completions]
    return [count_tags(c) for c in contents]


FENCE = "```html\n<answer>\nnot this\n</answer>\n```"
RESPONSES = [
    "<think>\nLet me add.\n</think>\n<answer>\n42\n</answer>",  # the layout itself
    "<think>\nLet me add.\n</think>\n<answer>\n42\n</answer>\n",  # a final newline
    "<think>\n\n</think>\n<answer>\n\n</answer>",  # empty blocks pass the reference
    "<think>\n</think>\n<answer>\n42\n</answer>",  # one newline for two
    "<think>Let me add.</think><answer>42</answer>",  # no newlines
    "<think>\nLet me add.\n</think>\n\n<answer>\n42\n</answer>",  # a blank line between
    " <think>\nx\n</think>\n<answer>\n42\n</answer>",  # leading space
    "<think>\nx\n</think>\n<answer>\n42\n</answer> ",  # trailing space on the last line
    "<think>\nx\n</think>\n<answer>\n42\n</answer>\nAnd more text after.",  # MULTILINE $
    "<think>\nx\n</think>\n<answer>\n42\n</answer>trailing on the line",
    "<think>\nx\n</think>\n<answer>\n1\n</answer>\n</think>\n<answer>\n2\n</answer>",  # twice
    "<think>\nouter <think>\ninner\n</think>\n</think>\n<answer>\n42\n</answer>",  # nested
    "<think>\nx\n</think>\n<answer>\n42\n</answer>\n</answer>",  # a stray close
    "<think>\nStill thinking when the tokens ran out, so",  # cut off
    "<think>\nStill thinking\n</think>\n<answer>\n42",  # cut off in the answer
    "Let me add.\n</think>\n<answer>\n42\n</answer>",  # the template opened <think>
    "<answer>\n42\n</answer>",  # no reasoning
    "",
    f"<think>\nAn example:\n{FENCE}\n</think>\n<answer>\n42\n</answer>",  # tags in a fence
    "<think>\nx\n</think>\n<answer>\n42\n</answer>\n\n<think>\nagain\n</think>",  # reopens
    "<think>\nx\n</think>\nThe answer is 42.",  # TRL's layout, no answer tags
    "<think>x</think>",
    "<think>\n\\n</think>\n<answer>\n42\n</answer>",  # a backslash-n is text
    "<think>\r\nx\r\n</think>\r\n<answer>\r\n42\r\n</answer>",  # CRLF
]


def _chat(texts: list[str]) -> list[list[dict[str, str]]]:
    return [[{"content": text}] for text in texts]


@pytest.mark.parametrize("text", RESPONSES)
def test_think_answer_gives_open_r1_format_reward_verdicts(text: str) -> None:
    assert rules.think_answer_r1(text).score == format_reward(_chat([text]))[0]


@pytest.mark.parametrize("text", RESPONSES)
def test_tag_count_gives_open_r1_tag_count_reward(text: str) -> None:
    assert rules.tag_count(text).score == tag_count_reward(_chat([text]))[0]


@pytest.mark.parametrize("text", RESPONSES)
def test_think_gives_trl_think_format_reward_verdicts(text: str) -> None:
    assert rules.think(text).score == think_format_reward(_chat([text]))[0]


def test_the_responses_exercise_both_verdicts_of_each_reference() -> None:
    """Agreement on responses every reference passes (or fails) would prove nothing."""
    chat = _chat(RESPONSES)
    for scores in (format_reward(chat), think_format_reward(chat)):
        assert {0.0, 1.0} <= set(scores)
    assert {0.0, 0.25, 0.5, 0.75, 1.0} <= set(tag_count_reward(chat))


def test_think_answer_r1_agrees_on_texts_that_backtrack_the_reference() -> None:
    """Many "\\n</think>\\n<answer>\\n" and no closing answer line: the reference's lazy
    ``.*?`` tries each, scanning to the end every time (quadratic); the rule finds the
    earliest once. Small enough here for the reference to finish."""
    middle = "\n</think>\n<answer>\n"
    for tail in ("", "\n</answer>", "\n</answer>x", "\n</answer>x\n</answer>\n"):
        text = "<think>\n" + ("step" + middle) * 300 + tail
        assert rules.think_answer_r1(text).score == format_reward(_chat([text]))[0], tail
