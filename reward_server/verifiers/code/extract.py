"""The program in a completion: the last fenced code block, else the whole response.

A block opens with a line starting ```` ``` ```` (optionally followed by a language tag) and
closes with a line that is ```` ``` ````. A completion cut off inside a block (no closing
fence) contributes the text after its opening fence. Linear-time scan, no regex over the
untrusted text."""

from __future__ import annotations

FENCE = "```"


def extract_code(response: str) -> str:
    lines = response.split("\n")
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in lines:
        stripped = line.strip()
        if current is None:
            if stripped.startswith(FENCE):
                current = []
        elif stripped == FENCE:
            blocks.append(current)
            current = None
        else:
            current.append(line)
    if current is not None:  # truncated inside a block
        blocks.append(current)
    if blocks:
        return "\n".join(blocks[-1]).strip("\n")
    return response.strip("\n")
