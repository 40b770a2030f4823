"""A program's bytes as the text of a JSON answer, within a budget of that answer's bytes.

The harness cuts what a snippet sends back to the response limit in bytes; as text a byte may
take more: an invalid one is written ``\\xff`` (four characters), and JSON writes that
backslash as two and a control character as ``\\u0000`` (six). So the host measures each
stream as the answer will carry it (starlette: UTF-8, non-ASCII unescaped) and cuts it there,
decoding only as much as it keeps: eight MiB of 0xff would be 32 M characters of text, and
five times that as JSON, if decoded whole first."""

from __future__ import annotations

import codecs
import json
from typing import Any

CHUNK = 1 << 16


def json_size(value: Any) -> int:
    """The bytes ``value`` takes as JSON in the answer, less its two delimiters (a string's
    quotes, a list's brackets)."""
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2


def fit_json(text: str, budget: int) -> tuple[str, int]:
    """The longest prefix of ``text`` whose JSON takes at most ``budget`` bytes, and its
    size: one pass in chunks (never the whole escaped text at once), then a bisection in the
    chunk where the budget runs out."""
    used = 0
    for start in range(0, len(text), CHUNK):
        piece = text[start:start + CHUNK]
        size = json_size(piece)
        if used + size > budget:
            low, high = 0, len(piece)  # piece[:low] fits, piece[:high + 1] does not
            while low < high:
                middle = (low + high + 1) // 2
                if used + json_size(piece[:middle]) <= budget:
                    low = middle
                else:
                    high = middle - 1
            return text[:start + low], used + json_size(piece[:low])
        used += size
    return text, used


def text_within(data: bytes, budget: int) -> tuple[str, int, bool]:
    """``data`` as text, invalid UTF-8 escaped (``\\xff``, as verdicts escape it), cut to
    ``budget`` bytes of JSON: the text, its JSON size, and whether it is whole."""
    decoder = codecs.getincrementaldecoder("utf-8")("backslashreplace")
    view, pieces, used = memoryview(data), [], 0
    for start in range(0, len(data), CHUNK):
        piece = decoder.decode(view[start:start + CHUNK], final=start + CHUNK >= len(data))
        size = json_size(piece)
        if used + size > budget:
            kept, size = fit_json(piece, budget - used)
            pieces.append(kept)
            return "".join(pieces), used + size, False
        pieces.append(piece)
        used += size
    return "".join(pieces), used, True
