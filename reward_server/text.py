"""Completion text as every verifier reads it: which part is reasoning, and how candidate
text is echoed back.

A JSON request may carry a lone surrogate (``"\\ud800"``); Python keeps it in the string, and
the JSON encoder of the response then fails, losing the whole batch. Every verifier that
echoes candidate text in a result passes it through ``printable`` (the sandbox's runner and
harness do the same to a program's output). A reasoning block is a draft the model may
abandon, never its answer: ``after_reasoning`` is the one reading of where it ends (math
and reasoning_gym both use it)."""

from __future__ import annotations

from sandbox.harness import protocol


def printable(text: str) -> str:
    """``text`` as valid Unicode: a lone surrogate becomes the six characters ``\\ud800``
    (the sandbox's rule for a program's output, so both spell it alike)."""
    return protocol.printable(text)


# (opener, closer) of the reasoning formats models write: R1/Qwen's <think>, <thinking>, the
# GRPO tutorials' <reasoning>, Mistral's [THINK], gpt-oss's analysis channel (its final
# channel's start ends the reasoning; the commentary channel is tool use, also no answer)
_REASONING = (("<think>", "</think>"), ("<thinking>", "</thinking>"),
              ("<reasoning>", "</reasoning>"), ("[THINK]", "[/THINK]"),
              ("<|channel|>analysis", "<|channel|>final<|message|>"),
              ("<|channel|>commentary", "<|channel|>final<|message|>"))


def after_reasoning(response: str) -> str | None:
    """The text after the last reasoning block's close; the whole text when there is none
    (a template that opens ``<think>`` in the prompt leaves only its close in the
    completion); None when a block opens after it and never closes (the model was cut off
    while thinking, or went back to thinking: ``</think> … <think> \\boxed{9}``)."""
    if "<" not in response and "[" not in response:
        return response
    start = 0
    for _, closer in _REASONING:
        close = response.rfind(closer)
        if close >= 0:
            start = max(start, close + len(closer))
    rest = response[start:] if start else response
    if any(opener in rest for opener, _ in _REASONING):
        return None
    return rest
