"""The ``<answer>…</answer>`` span of the GRPO/open-r1 format (an explicit answer marker).
Code, tool output and reasoning blocks, which are no answer, are ``reward_server.text``'s
(``without_code``, ``after_reasoning``): the format verifier reads them the same way. Every
scan is ``str.find``/``rfind``: linear in the text.
"""

from __future__ import annotations

from reward_server.text import opens_line

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
    if reopened >= 0 and opens_line(text, reopened):
        return False
    if close < 0:
        return None
    start = text.rfind(OPEN_ANSWER, 0, close)
    if start < 0:
        return None
    return close + len(CLOSE_ANSWER), text[start + len(OPEN_ANSWER):close]
