"""Pull the final answer out of a free-form completion.

Every scan here is linear in the length of the completion (no backtracking regular
expression runs over untrusted text), so a 1 MB response costs milliseconds and this can
run in the server process before anything is sent to a worker.

Precedence, first hit wins: the last ``\\boxed{}``/``\\fbox{}``; the last GSM8K ``#### x``;
the last "the answer is x"; the last ``$…$`` / ``\\(…\\)`` / ``\\[…\\]`` span; and, only in
``last_number`` mode, the last bare number.
"""

from __future__ import annotations

import re
from typing import Literal

ExtractMode = Literal["auto", "boxed", "last_number"]

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_MAX_BOX_TRIES = 8  # unmatched \boxed{ repeated many times must not make the scan quadratic
_TAIL_CHARS = 4000  # "answer is" / last-number scans look at the end of the text only
_SPAN_CHARS = 20_000


_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.S)


def match_brace(text: str, open_index: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_index``; None when unbalanced.

    Escaped braces (``\\{``) count as text, as LaTeX treats them. The regex visits only
    braces and backslashes, so a megabyte of plain text is skipped at C speed."""
    depth = 0
    for m in _BRACE_TOKENS.finditer(text, open_index):
        token = m.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return None


def _last_boxed(text: str) -> str | None:
    end = len(text)
    for _ in range(_MAX_BOX_TRIES):
        start, command = max((text.rfind(cmd, 0, end), cmd) for cmd in _BOX_COMMANDS)
        if start < 0:
            return None
        i = start + len(command)
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            close = match_brace(text, i)
            if close is not None:
                return text[i + 1 : close]
        elif command == "\\boxed" and i > start + len(command):
            # "\boxed 5": TeX takes the next token as the argument
            token = re.match(r"[^\s$]+", text[i : i + 200])
            if token:
                return token.group(0)
        end = start
    return None


def _last_hashes(text: str) -> str | None:
    start = text.rfind("####")
    if start < 0:
        return None
    line = text[start + 4 :].lstrip("# ").split("\n", 1)[0].strip()
    return line or None


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - we want the last one
        pass
    return found


_ANSWER_IS = re.compile(r"(?:final answer|answer)\s*(?:is\s*:?|:)\s*", re.IGNORECASE)


def _answer_is(text: str) -> str | None:
    tail = text[-_TAIL_CHARS:]
    last = _last_match(_ANSWER_IS, tail)
    if last is None:
        return None
    rest = tail[last.end() :].split("\n", 1)[0].strip()
    span = _last_math_span(rest)
    if span is not None and rest.lstrip().startswith(("$", "\\(", "\\[")):
        return span
    # up to the end of the sentence: a period followed by a space or the end of the line
    sentence = re.split(r"\.(?:\s|$)", rest, maxsplit=1)[0]
    sentence = sentence.strip().strip("*").strip()
    return sentence or None


def _last_math_span(text: str) -> str | None:
    """Contents of the last ``$…$``, ``$$…$$``, ``\\(…\\)`` or ``\\[…\\]`` span (in the
    last ``_SPAN_CHARS`` characters: a final answer is near the end)."""
    text = text[-_SPAN_CHARS:]
    best_start = -1
    best: str | None = None
    for opener, closer in (("\\(", "\\)"), ("\\[", "\\]")):
        close = text.rfind(closer)
        if close >= 0:
            open_ = text.rfind(opener, 0, close)
            if open_ >= 0 and open_ > best_start:
                best_start, best = open_, text[open_ + 2 : close]
    dollars = [i for i in _dollar_positions(text)]
    if len(dollars) >= 2:
        close = dollars[-1]
        open_ = dollars[-2]
        if open_ > best_start:
            best_start, best = open_, text[open_ + 1 : close].strip("$")
    if best is None:
        return None
    best = best.strip()
    return best or None


_DOLLAR_TOKENS = re.compile(r"\\.|\$\$?", re.S)


def _dollar_positions(text: str) -> list[int]:
    """Positions of unescaped ``$``, with ``$$`` counted once."""
    return [m.start() for m in _DOLLAR_TOKENS.finditer(text) if m.group()[0] == "$"]


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def _last_number(text: str) -> str | None:
    last = _last_match(_NUMBER, text[-_TAIL_CHARS:])
    return last.group(0).rstrip(",") if last else None


def extract_answer(response: str, mode: ExtractMode = "auto") -> str | None:
    """The final answer of ``response`` as a string, or None when it states none."""
    boxed = _last_boxed(response)
    if boxed is not None:
        return boxed.strip() or None
    if mode == "boxed":
        return None
    for finder in (_last_hashes, _answer_is, _last_math_span):
        found = finder(response)
        if found is not None:
            return found
    if mode == "last_number":
        return _last_number(response)
    return None


def extract_gold(answer: str) -> str:
    """The reference answer: a dataset may store it boxed, after ``####``, or bare."""
    boxed = _last_boxed(answer)
    if boxed is not None:
        return boxed.strip()
    hashes = _last_hashes(answer)
    if hashes is not None:
        return hashes
    return answer.strip().strip("$").strip()
