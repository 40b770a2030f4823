"""Completion text as every verifier reads it: which part is reasoning, which is code or tool
output (no statement of the model's), where an answer is marked (a box, an ``<answer>``
span, an "Answer:" line), and how candidate text is echoed back.

A JSON request may carry a lone surrogate (``"\\ud800"``); Python keeps it in the string, and
the JSON encoder of the response then fails, losing the whole batch. Every verifier that
echoes candidate text in a result passes it through ``printable`` (the sandbox's runner and
harness do the same to a program's output). A reasoning block is a draft the model may
abandon, never its answer: ``after_reasoning`` is the one reading of where it ends (math
and reasoning_gym both use it).

The answer markers are found here once for every verifier, each by a scan linear in the
text (a completion is hostile by construction: RL searches for the text that costs most).
Where verifiers read a marker differently, because the reference each must agree with
does (``\\{`` as a brace or as text, the last box or the last closed one, the last
``</answer>`` or the lazy regex's last span), the difference is a parameter, named for
whose reading it is."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from reward_server.braces import Braces
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


# --- answer markers ------------------------------------------------------------------------

@dataclass(frozen=True)
class Span:
    """A marked answer: ``text[start:end]`` whole (``\\boxed{5}``, ``<answer>5</answer>``),
    ``content`` what it holds, as the function that found it reads it."""

    start: int
    end: int
    content: str


def last_match(pattern: re.Pattern[str], text: str, pos: int = 0) -> re.Match[str] | None:
    """The last of ``pattern``'s matches in ``text`` from ``pos``, as ``finditer`` finds
    them (left to right, none overlapping): the last statement of an answer."""
    last = None
    for last in pattern.finditer(text, pos):  # noqa: B007 - the last one
        pass
    return last


# --- boxes: \boxed{…} and \fbox{…} -----------------------------------------------------------

BOX_COMMANDS = ("\\boxed", "\\fbox")
MAX_BOXES = 8  # boxes read back from the end; unmatched \boxed{ repeated must stay linear
_BOX_BRACE = re.compile(r"\\(?:boxed|fbox) *\{")  # a box's command and its brace
_SPACES = re.compile(r" *")
_BRACE = re.compile(r"[{}]")


class _LastCommand:
    """The last of ``commands`` before an index, each command's text searched once."""

    def __init__(self, text: str, lo: int = 0, commands: tuple[str, ...] = BOX_COMMANDS
                 ) -> None:
        self.text, self.lo, self.commands = text, lo, commands
        self.found: dict[str, int] = {}

    def before(self, end: int) -> tuple[int, str]:
        """Where the last command that ends by ``end`` starts, and which it is; -1 when
        none does (``end`` never grows from one call to the next)."""
        last, which = -1, ""
        for cmd in self.commands:
            at = self.found.get(cmd)
            if at is None or at + len(cmd) > end:  # the earlier answer lies past end
                at = self.found[cmd] = self.text.rfind(cmd, self.lo, end) if at != -1 else -1
            if at > last:
                last, which = at, cmd
        return last, which


def boxes_from_end(text: str) -> tuple[list[Span], bool]:
    """Up to ``MAX_BOXES`` outermost non-empty boxes, last first; and whether a box was
    cut off (unclosed): the math verifier's reading. Braces as TeX reads them (``\\{`` is
    text); spaces may stand before the brace, and ``\\boxed 5`` boxes the token after it.
    A box inside a box is part of the outer one's content, never an answer of its own (its
    command is taken out, ``_unbox``); an empty box (``\\boxed{}`` echoed from the prompt) is
    skipped. The content is stripped."""
    found: list[Span] = []
    cut_off = False
    end = len(text)
    closes = Braces(text, _BOX_BRACE)
    commands = _LastCommand(text)
    for _ in range(MAX_BOXES * 2):
        if len(found) >= MAX_BOXES:
            break
        start, command = commands.before(end)
        if start < 0:
            break
        i = _SPACES.match(text, start + len(command)).end()
        if i < len(text) and text[i] == "{":
            close = closes.close(start, i)
            if close is None:
                cut_off = True
            else:
                while found and found[-1].start < close:  # nested in this one
                    found.pop()
                content = _unbox(text, i + 1, close, closes).strip()
                if content:
                    found.append(Span(start, close + 1, content))
        elif command == "\\boxed" and i > start + len(command):
            # "\boxed 5": TeX takes the next token as the argument
            token = re.match(r"[^\s$]+", text[i : i + 200])
            if token:
                found.append(Span(start, i + token.end(), token.group(0)))
        else:
            cut_off = True
        end = start
    return found, cut_off


def _unbox(text: str, lo: int, hi: int, closes: Braces) -> str:
    """``text[lo:hi]`` (a box's content) with up to ``MAX_BOXES`` box commands inside it
    removed, the last first (their contents kept); it stops at a command with no braced
    argument. The inner boxes' braces were matched when their outer box was."""
    cut: list[tuple[int, int]] = []  # spans of the text left out
    commands = _LastCommand(text, lo)
    end = hi
    for _ in range(MAX_BOXES):
        start, command = commands.before(end)
        if start < 0:
            break
        i = _SPACES.match(text, start + len(command), hi).end()
        close = closes.closes.get(i) if i < hi and text[i] == "{" else None
        if close is None or close >= hi:
            break
        cut += [(start, i + 1), (close, close + 1)]
        end = start
    if not cut:
        return text[lo:hi]
    pieces, at = [], lo
    for start, stop in sorted(cut):
        pieces.append(text[at:start])
        at = stop
    pieces.append(text[at:hi])
    return "".join(pieces)


def last_box(text: str, commands: tuple[str, ...] = BOX_COMMANDS, *, closed_only: bool = False
             ) -> Span | None | Literal[False]:
    """The last of ``commands`` with its brace right after it (``\\boxed{``), every brace
    counted (``\\{`` too), its content as written: the format rule's reading and
    reasoning-gym's. A box inside a box is read on its own (``\\boxed{1 \\boxed{2}}``
    holds 2). None when there is none; False when the last one never closes (the format
    rule's "cut off"). ``closed_only`` (reasoning-gym's reading): the last box whose braces
    balance, passing over any after it that do not; None when none does.

    One pass over the text in all: a box that does not close before the next one starts
    can only close after that one closes, so each box's braces are counted up to the start
    of the one after it that failed. (``Braces``, the math reading's matcher, costs a few
    microseconds a box: six times this on 2 MB of unclosed boxes.)"""
    found = _LastCommand(text, commands=tuple(command + "{" for command in commands))
    limit = len(text)
    while True:
        start, command = found.before(limit)
        if start < 0:
            return None
        brace = start + len(command) - 1
        depth = 1
        for mark in _BRACE.finditer(text, brace + 1, limit):
            depth += 1 if mark.group() == "{" else -1
            if depth == 0:
                return Span(start, mark.end(), text[brace + 1:mark.start()])
        if not closed_only:
            return False
        limit = start


# --- <answer>…</answer> --------------------------------------------------------------------

OPEN_ANSWER, CLOSE_ANSWER = "<answer>", "</answer>"


def last_answer_tag(text: str, *, lazy: bool = False) -> Span | None:
    """The last ``<answer>…</answer>``; None when there is none. Every scan is
    ``str.find``/``rfind``: linear in the text.

    The last ``</answer>`` and the nearest ``<answer>`` before it (``<answer>1<answer>2
    </answer>`` holds 2): the format rule's reading and the math verifier's. ``lazy``: as
    the regex ``<answer>(.*?)</answer>`` reads the text with ``finditer`` (each
    ``<answer>`` to the first ``</answer>`` after it, the next span after that one, so the
    same text holds ``1<answer>2``): reasoning-gym's ``extract_answer``, whose regex
    rescans the rest of the text from every ``<answer>`` that has no close (quadratic on
    2 MB of them)."""
    if lazy:
        found = None
        start = text.find(OPEN_ANSWER)
        while start >= 0:
            close = text.find(CLOSE_ANSWER, start + len(OPEN_ANSWER))
            if close < 0:
                break  # no close after this one: none after any later one either
            found = start, close
            start = text.find(OPEN_ANSWER, close + len(CLOSE_ANSWER))
        if found is None:
            return None
        start, close = found
    else:
        close = text.rfind(CLOSE_ANSWER)
        start = text.rfind(OPEN_ANSWER, 0, close) if close >= 0 else -1
        if start < 0:
            return None
    return Span(start, close + len(CLOSE_ANSWER), text[start + len(OPEN_ANSWER):close])


# --- "Answer: …" lines ---------------------------------------------------------------------

# "Answer: 42", "**Final Answer:** 42", "answer： 42" on a line of its own; anchored at a
# line's start, each try reads one line prefix: linear
_ANSWER_LINE = re.compile(r"(?im)^[ \t>#*_]*(?:final[ \t]+)?answer[ \t*_]*[:：][ \t*_]*(\S.*)$")


def last_answer_line(text: str) -> Span | None:
    """The last line that states its answer after an "Answer:" label (``Answer: 42``,
    ``**Final Answer:** 42``, ``answer： 42``); its content what follows the label."""
    line = last_match(_ANSWER_LINE, text)
    return None if line is None else Span(line.start(), line.end(), line.group(1))
