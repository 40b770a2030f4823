"""The program in a completion: the last fenced code block, else the whole response.

A block opens with a line starting ```` ``` ```` (optionally followed by a language tag) and
closes with a line that is ```` ``` ````. A completion cut off inside a block (no closing
fence) contributes the text after its opening fence.

The scan runs on the event loop, so it must not cost a Python step per line (a megabyte
of newlines is a million of them): one regular expression reads the whole text, block
after block, and keeps the last block's lines (a repeated group keeps its last match). It
is linear with no backtracking: a line either opens a block or not, and inside a block
either closes it or not; the quantifiers are possessive."""

from __future__ import annotations

import re

FENCE = "```"

# Whitespace but the newline ([^\S\n]) is what str.strip() takes off a line's ends.
_CLOSING = r"[^\S\n]*```[^\S\n]*(?=\n|\Z)"
_BLOCKS = re.compile(
    r"(?:"
    r"(?:(?![^\S\n]*```)[^\n]*\n)*+"  # lines outside a block
    r"[^\S\n]*```[^\n]*"  # the opening line
    r"((?:\n(?!" + _CLOSING + r")[^\n]*)*+)"  # the block's lines, each after its newline
    r"(?:\n" + _CLOSING + r")?\n?"  # the closing line (none: cut off inside the block)
    r")*+"
)


def extract_code(response: str) -> str:
    if FENCE not in response:
        return response.strip("\n")
    lines = _BLOCKS.match(response).group(1)  # type: ignore[union-attr]  # matches ""
    if lines is None:
        return response.strip("\n")
    return lines[1:].strip("\n")
