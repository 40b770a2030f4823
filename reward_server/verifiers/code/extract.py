"""The program in a completion: the last fenced code block, else the whole response.

A block opens with a line starting ```` ``` ```` (optionally followed by a language tag) and
closes with a line that is ```` ``` ````. A completion cut off inside a block (no closing
fence) contributes the text after its opening fence.

The scan runs on the event loop, so it must not cost a Python step per line (a megabyte
of newlines is a million of them): a regular expression finds the fence lines (``` at a
line's start), and only those are looked at, in order. No possessive quantifier or atomic
group: Python 3.11 before 3.11.5 (Debian 12's, which the offline server image runs) matches
them wrongly (gh-106052), which read every fenced program as its whole response."""

from __future__ import annotations

import re

FENCE = "```"
# a line that starts with a fence (after spaces): an opening line outside a block, and a
# closing line inside one when nothing but spaces follows the fence
_FENCE_LINE = re.compile(r"^[^\S\n]*```[^\n]*", re.M)


def extract_code(response: str) -> str:
    if FENCE not in response:
        return response.strip("\n")
    block: str | None = None
    opened_at: int | None = None  # where the open block's text starts (its opening's end)
    for line in _FENCE_LINE.finditer(response):
        if opened_at is None:
            opened_at = line.end()
        elif line.group().strip() == FENCE:
            block, opened_at = response[opened_at:line.start()], None
    if opened_at is not None:  # cut off inside a block
        block = response[opened_at:]
    if block is None:
        return response.strip("\n")
    return block[1:].strip("\n")
