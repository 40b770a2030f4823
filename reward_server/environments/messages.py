"""What a caller sends an environment, read as the server reads a body: a WebSocket message
(``episode``) or an HTTP ``/reset`` or ``/step`` body (``stateless``) parsed and validated off
the event loop when it is large (``read``), and refused in the server's words: the field and
what is wrong with it (``format_validation_errors``), never the input (pydantic's error list
echoed it: a 60 MB unknown field came back as a 60 MB 422, rendered on the loop), nor a
library's own text (``JSONDecodeError``'s, FastAPI's "There was an error parsing the body").

The JSON is parsed as ``json_body`` parses a body (pydantic's parser from the text, Python's
for what that one is stricter about), its errors said here: ``json_body.loads`` answers in
Python's words, which the rest of the API still uses."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from openenv.core.env_server.types import (
    Action,
    ResetRequest,
    StepRequest,
    WSCloseMessage,
    WSResetMessage,
    WSStateMessage,
    WSStepMessage,
)
from pydantic import BaseModel, ValidationError

from reward_server.errors import InvalidItems, format_validation_errors, location_part
from reward_server.json_body import decoded
from reward_server.scoring import off_the_loop_if

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
TYPES = ("reset", "step", "state", "close")  # what OpenEnv's EnvClient sends in an episode
ENVELOPES: dict[str, type[BaseModel]] = {"reset": WSResetMessage, "step": WSStepMessage,
                                         "state": WSStateMessage, "close": WSCloseMessage}
# shorter than this, a text is read on the loop: a thread's hop costs about what parsing it does
LARGE_CHARS = 64 * 1024


class Malformed(InvalidItems):
    """Not JSON, or not the object a message or body is."""


class Unserved(InvalidItems):
    """A message type that is not an episode's."""


class InvalidFields(InvalidItems):
    """Fields refused, each named (a ``VALIDATION_ERROR`` frame, a 422): an action's or a
    reset's; ``errors``: a model's errors, each one's ``loc``, ``msg`` and ``type`` (none for
    a refusal in the server's words alone, as a verifier's reset item's)."""

    def __init__(self, message: str, headers: dict[str, str] | None = None,
                 errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message, headers)
        self.errors = errors or []

    @classmethod
    def of(cls, exc: ValidationError, prefix: tuple[Any, ...]) -> InvalidFields:
        errors = exc.errors(include_input=False, include_url=False)
        return cls(format_validation_errors(errors, prefix), errors=[
            {"loc": [location_part(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
            for e in errors[:20]])


async def read(fn: Callable[..., T], text: str | bytes, *args: Any) -> T:
    """``fn(text, *args)``, on a thread when the text is large."""
    return await off_the_loop_if(len(text) > LARGE_CHARS, fn, text, *args)


def parse(text: str | bytes, where: str) -> Any:
    """JSON ``text``; ``Malformed`` (422) saying where it is not."""
    try:
        return decoded(text)
    except json.JSONDecodeError as exc:
        raise Malformed(f"{where}: malformed JSON at character {exc.pos} (line {exc.lineno}, "
                        f"column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise Malformed(f"{where}: not UTF-8 text (byte {exc.start})") from None
    except RecursionError:
        raise Malformed(f"{where}: JSON nested too deeply to parse") from None
    except ValueError:  # an integer past Python's digits limit
        raise Malformed(f"{where}: a JSON number too long to parse") from None


def validated(model: type[M], data: Any, prefix: tuple[Any, ...] = ()) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidFields.of(exc, prefix) from None


def message(text: str, action_cls: type[Action]) -> tuple[str, Any]:
    """A WebSocket message: its type and what the episode acts on (a reset's fields, a
    step's action; None for ``state`` and ``close``)."""
    data = parse(text, "message")
    if not isinstance(data, dict):
        raise Malformed('a message is an object: {"type": ..., "data": {...}}')
    kind = data.get("type")
    if kind not in TYPES:
        raise Unserved(f"type: {shown(kind)} is not served; an episode's messages are "
                       f"{', '.join(TYPES)}")
    envelope = validated(ENVELOPES[kind], data)
    if kind == "reset":
        return kind, envelope.data  # type: ignore[attr-defined]
    if kind == "step":
        return kind, validated(action_cls, envelope.data, ("action",))  # type: ignore[attr-defined]
    return kind, None


def reset_body(raw: bytes) -> dict[str, Any]:
    """An HTTP ``/reset`` body: reset's fields (none: an empty body, as OpenEnv takes it)."""
    if not raw or raw.isspace():
        return {}
    data = parse(raw, "body")
    if not isinstance(data, dict):
        raise Malformed("body: an object of reset's fields")
    request = validated(ResetRequest, data, ("reset",))
    return {**data, **request.model_dump(include=set(data) & {"seed", "episode_id"})}


def step_body(raw: bytes, action_cls: type[Action]) -> tuple[Action, float | None]:
    """An HTTP ``/step`` body: its action and ``timeout_s``."""
    data = parse(raw, "body")
    if not isinstance(data, dict):
        raise Malformed('body: an object: {"action": {...}}')
    request = validated(StepRequest, data)
    return validated(action_cls, request.action, ("action",)), request.timeout_s


def shown(kind: Any) -> str:
    """``type``'s value as an error names it: a short string quoted, else its JSON kind."""
    if isinstance(kind, str):
        return repr(kind[:40])
    return {dict: "an object", list: "an array", type(None): "missing or null"}.get(
        type(kind), "a " + type(kind).__name__)
