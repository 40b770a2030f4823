"""Completion text as every verifier reads it: which part is reasoning, which is code or tool
output (no statement of the model's), and how candidate text is echoed back.

A JSON request may carry a lone surrogate (``"\\ud800"``); Python keeps it in the string, and
the JSON encoder of the response then fails, losing the whole batch. Every verifier that
echoes candidate text in a result passes it through ``printable`` (the sandbox's runner and
harness do the same to a program's output). A reasoning block is a draft the model may
abandon, never its answer: ``after_reasoning`` is the one reading of where it ends (math
and reasoning_gym both use it)."""

from __future__ import annotations

import re

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


# --- code and tool output ------------------------------------------------------------------

# tags whose content is a program's or a tool's; a tag is one only when it pairs, or when an
# unclosed one opens a line (a tool call cut off); a mention in prose ("the <code> tag") is text
_TAGS = (("<tool_call>", "</tool_call>"), ("<tool_response>", "</tool_response>"),
         ("<code>", "</code>"), ("<output>", "</output>"), ("<interpreter>", "</interpreter>"))
# CommonMark: a fence opens a line (up to 3 spaces of indent) with ``` or ~~~; it closes at a
# line of the same character, at least as many, and nothing else; unclosed, it runs to the end
_FENCE = re.compile(r"(?m)^ {0,3}(`{3,}|~{3,})")
# more fenced blocks than any solution writes: hostile text, a Python step each; it states no
# answer (cutting it short could only leave an earlier statement standing as the last)
_MAX_FENCES = 4096


def _fence_close(text: str, fence: str, at: int) -> re.Match[str] | None:
    return re.compile(r"(?m)^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence))
                      + r",}[ \t]*$").search(text, at)


def without_code(text: str) -> str:
    """``text`` with code blocks and tool output cut out, each left as a paragraph break so
    that no list or sentence joins across it. Linear: each search starts where the last
    block ended, and a closer searched for and not found ends the scan of its kind."""
    if "```" in text or "~~~" in text:
        pieces, at = [], 0
        while (opener := _FENCE.search(text, at)) is not None:
            if len(pieces) > 2 * _MAX_FENCES:
                return ""
            pieces.append(text[at:opener.start()])
            line_end = text.find("\n", opener.end())
            close = None if line_end < 0 else _fence_close(text, opener.group(1), line_end + 1)
            if close is None:
                at = len(text)
                break
            pieces.append("\n\n")
            at = close.end()
        text = "".join(pieces) + text[at:]
    if "<" not in text:
        return text
    for opener, closer in _TAGS:
        if opener not in text:
            continue
        pieces, at = [], 0
        while (start := text.find(opener, at)) >= 0:
            end = text.find(closer, start + len(opener))
            if end < 0:
                if opens_line(text, start):
                    pieces.append(text[at:start])
                    at = len(text)
                break
            pieces += [text[at:start], "\n\n"]
            at = end + len(closer)
        text = "".join(pieces) + text[at:]
    return text


def opens_line(text: str, at: int) -> bool:
    """Whether only spaces, or a tag's ``>``, stand between the line start and ``at``."""
    before = text[max(0, at - 200):at].rstrip(" \t")
    return not before or before[-1] in "\n>"
