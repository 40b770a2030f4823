"""A route's JSON body read by the route itself and validated off the event loop.

FastAPI parses a declared body on the event loop (``json.loads`` of the text, then the
model): for a sandbox route's body of files (up to the 64 MB limit, base64) that held every
other caller for about half a second per request, and a 50 MB batch of completions to
``/v1/rewards`` or ``/get_reward`` 110-150 ms. Here the bytes are read as they came
(``read_body``: the one chunk the body limit handed on, not a copy of it), parsed from the
bytes by pydantic's parser and validated on a thread, its errors a 422 naming the field in
FastAPI's words (the model validates Python objects, as FastAPI's did). The parse is one C
call that holds the interpreter lock: about 11 ms per 58 MB of strings, where decoding the
text and ``json.loads`` took 85 ms; the body limit's counts bound it (``json_shape``). What
that parser refuses is read again by ``json.loads``, as FastAPI read it: JSON it is stricter
about (a lone surrogate, whose file name is then refused by name) and its error messages.

The route still shows its model on the API page: ``body_schema`` is the operation's request
body, as FastAPI would have written it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import from_json
from starlette.requests import Request

from reward_server.errors import InvalidItems, format_validation_errors

M = TypeVar("M", bound=BaseModel)


async def read_body(request: Request) -> bytes:
    """The request's body; the chunk itself when it came in one (``BodyLimit`` hands it on
    whole), where ``Request.body`` joins it with the empty chunk that ends it: a copy."""
    chunks = [chunk async for chunk in request.stream() if chunk]
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def validated(model: type[M], raw: bytes) -> M:
    """``raw`` as ``model``; ``InvalidItems`` (422) naming each bad field."""
    if not raw or raw.isspace():
        raise InvalidItems("body: Field required")  # FastAPI's word for a missing body
    return as_model(model, loads(raw, decoded))


def decoded(text: str | bytes) -> Any:
    """``text`` parsed as ``validated`` parses a body (pydantic's parser, Python's for what
    that one is stricter about), ``json.loads``'s errors left to the caller to word."""
    try:
        return from_json(text)
    except ValueError:  # or JSON it is stricter about than json.loads (a lone surrogate)
        return json.loads(text)


def as_model(model: type[M], data: Any) -> M:
    """Parsed JSON as ``model`` (as FastAPI validates it); ``InvalidItems`` (422) naming each
    bad field."""
    try:
        return model.model_validate(data, from_attributes=True)  # as FastAPI calls it
    except ValidationError as exc:
        raise InvalidItems(format_validation_errors(exc.errors(include_input=False))) from None


def loads(raw: bytes, parse: Callable[[bytes], Any] = json.loads) -> Any:
    """``raw`` as FastAPI parsed it (``json.loads``, or ``parse``), its errors as a 422."""
    try:
        return parse(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidItems(f"body: malformed JSON: {exc}") from None
    except RecursionError:
        raise InvalidItems("body: nests too deeply to parse") from None


def json_body(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A dependency that gives the endpoint its body as ``model``, validated on a thread."""

    async def parsed(request: Request) -> M:
        return await asyncio.to_thread(validated, model, await read_body(request))

    return parsed


def body_schema(path: str, model: type[BaseModel], method: str = "post") -> dict[str, Any]:
    """``model``'s JSON schema for the operation's request body, its definitions kept inside
    it (the refs point into the body itself, so no component has to be registered)."""
    # a JSON pointer in a URI fragment: a path parameter's braces percent-encoded
    pointer = (path.replace("~", "~0").replace("/", "~1").replace("{", "%7B")
               .replace("}", "%7D"))
    template = (f"#/paths/{pointer}/{method}/requestBody/content/application~1json/schema/"
                "$defs/{model}")
    schema = model.model_json_schema(ref_template=template)
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}
