"""JSON text of an answer too large to render on the event loop, rendered on a worker thread
so that the loop goes on meanwhile.

A thread alone does not free the loop: ``json.dumps`` and pydantic's ``model_dump_json`` each
encode a string in one C call that holds the interpreter lock throughout, so a 13 MiB cell's
output held every other caller for 90-125 ms whichever thread rendered it. Here a long string
is encoded ``PIECE_CHARS`` at a time, and between two pieces the thread gives the lock up when
the loop asks for it (every 5 ms: ``sys.getswitchinterval``), so the loop waits at most a
piece's encoding. A piece is cut between code points, so its escapes are those of the whole.

Text goes out as UTF-8, as pydantic writes it; a piece with a lone surrogate (which UTF-8
cannot carry, and a caller's JSON can: ``"\\ud800"``) is written with JSON's escapes instead.

An HTTP answer (``json_response``) is built, dumped and rendered on a thread the same way, and
encoded to UTF-8 ``PIECE_CHARS`` at a time: ``JSONResponse`` on a thread still held the lock
through one ``json.dumps`` of a program's 32 MiB output, and ``/v1/rewards`` built and dumped
its answer on the loop itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from json.encoder import encode_basestring, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from pydantic import BaseModel
from starlette.responses import Response

PIECE_CHARS = 1 << 16  # ~0.1-0.5 ms of encoding: what the loop may wait for the lock


def render(value: Any) -> str:
    """``value`` (dicts with string keys, lists, strings, numbers, booleans and None) as JSON
    text, long strings a piece at a time; a TypeError for anything else."""
    out: list[str] = []
    _render(value, out)
    return "".join(out)


def render_bytes(value: Any) -> bytes:
    """``render``'s text as UTF-8, encoded a piece at a time."""
    out: list[str] = []
    _render(value, out)
    return b"".join(_utf8(out))


async def json_response(build: Callable[[], BaseModel | Any], status_code: int = 200
                        ) -> Response:
    """The answer ``build`` gives (a model, dumped as JSON data, or JSON data), built and
    rendered on a worker thread, a piece at a time."""

    def rendered() -> bytes:
        value = build()
        return render_bytes(value.model_dump(mode="json") if isinstance(value, BaseModel)
                            else value)

    return Response(await asyncio.to_thread(rendered), status_code=status_code,
                    media_type="application/json")


def _utf8(pieces: Iterable[str]) -> Iterator[bytes]:
    """``pieces`` as UTF-8, joined and encoded about ``PIECE_CHARS`` at a time (an encoder
    call per small piece would cost more than encoding it)."""
    batch: list[str] = []
    size = 0
    for piece in pieces:
        batch.append(piece)
        size += len(piece)
        if size >= PIECE_CHARS:
            yield "".join(batch).encode()
            batch, size = [], 0
    if batch:
        yield "".join(batch).encode()


def _render(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        if len(value) <= PIECE_CHARS:
            out.append(_string(value))
            return
        out.append('"')
        for at in range(0, len(value), PIECE_CHARS):
            out.append(_string(value[at:at + PIECE_CHARS])[1:-1])
        out.append('"')
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise TypeError(f"a key of {type(key).__name__}: JSON's keys are strings")
            out.append("," if i else "")
            out.append(_string(key))
            out.append(":")
            _render(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            out.append("," if i else "")
            _render(item, out)
        out.append("]")
    elif value is None or isinstance(value, bool):
        out.append({None: "null", True: "true", False: "false"}[value])
    elif isinstance(value, int | float):
        out.append(_number(value))
    else:
        raise TypeError(f"{type(value).__name__} is not JSON")


def _string(text: str) -> str:
    if text.isascii():  # (a flag of the string: no pass over it)
        return encode_basestring_ascii(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: escaped, as UTF-8 cannot carry it
        return encode_basestring_ascii(text)
    return encode_basestring(text)


def _number(value: int | float) -> str:
    if isinstance(value, int):
        return int.__repr__(value)  # (an IntEnum's own repr is its name)
    if value != value or value in (float("inf"), float("-inf")):
        return "null"  # as pydantic writes them: JSON has no NaN or infinity
    return float.__repr__(value)
