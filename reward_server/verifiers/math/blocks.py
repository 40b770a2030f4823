"""The blocks of a completion that are not its answer, and the one that is.

Code and tool output (what a program or a tool says is no statement of the model's), and
the ``<answer>…</answer>`` span of the GRPO/open-r1 format (an explicit answer marker); the
reasoning blocks are ``reward_server.text.after_reasoning``'s. Every scan is
``str.find``/``rfind`` or a regex search that moves forward: linear in the text.
"""

from __future__ import annotations

import re

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
                if _opens_line(text, start):
                    pieces.append(text[at:start])
                    at = len(text)
                break
            pieces += [text[at:start], "\n\n"]
            at = end + len(closer)
        text = "".join(pieces) + text[at:]
    return text


def _opens_line(text: str, at: int) -> bool:
    """Whether only spaces, or a tag's ``>``, stand between the line start and ``at``."""
    before = text[max(0, at - 200):at].rstrip(" \t")
    return not before or before[-1] in "\n>"


# --- the <answer> span -----------------------------------------------------------------------

OPEN_ANSWER, CLOSE_ANSWER = "<answer>", "</answer>"


def answer_span(text: str) -> tuple[int, str] | None | bool:
    """The last ``<answer>…</answer>``: ``(where it ends, its content)``; None when there is
    none; False when an ``<answer>`` that opens a line (or follows a tag) after the last
    close never closes: the answer was cut off."""
    if OPEN_ANSWER not in text:
        return None
    close = text.rfind(CLOSE_ANSWER)
    reopened = text.rfind(OPEN_ANSWER, max(close, 0))
    if reopened >= 0 and _opens_line(text, reopened):
        return False
    if close < 0:
        return None
    start = text.rfind(OPEN_ANSWER, 0, close)
    if start < 0:
        return None
    return close + len(CLOSE_ANSWER), text[start + len(OPEN_ANSWER):close]
