"""An episode over the WebSocket (``/ws``): the server's own endpoint in place of OpenEnv's,
speaking OpenEnv's wire format (``WSResetMessage`` ... ``WSErrorResponse``, its error codes)
so that its ``EnvClient`` connects unchanged. Three things OpenEnv's endpoint did that no door
in front of it (``gate``) could change:

- **only an episode's messages**: ``reset``, ``step``, ``state`` and ``close``, which are what
  ``EnvClient`` sends. OpenEnv's also served ``mcp`` (JSON-RPC to tools, and sessions of its
  own); any type but these four is an error frame naming ``type``, and the episode goes on.
- **frames rendered off the loop**: OpenEnv rendered an observation on the event loop
  (``model_dump_json``: a 13 MiB cell's output held every other caller 46-119 ms). Here a
  frame is rendered on a worker thread a piece at a time (``json_render``); the loop hands
  the text to the socket.
- **errors in the server's words**: an ``ApiError``'s message (the field, the limit), a
  model's errors by field; anything else is a bug, logged with an id that the frame names,
  never Python's own text (OpenEnv sent ``str(exc)`` of whatever was raised).

An episode is its connection: the environment is made when it opens and ended when it closes
(the client's close, a dropped connection, or the gate's idle limit), with no registry of
sessions outliving a connection to cap or reap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import (
    Action,
    Observation,
    WSCloseMessage,
    WSErrorCode,
    WSResetMessage,
    WSStateMessage,
    WSStepMessage,
)
from pydantic import BaseModel, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from reward_server.environments.base import LoopEnvironment
from reward_server.errors import ApiError, InternalError, format_validation_errors
from reward_server.json_render import render

log = logging.getLogger("reward_server")
TYPES = ("reset", "step", "state", "close")  # what OpenEnv's EnvClient sends in an episode


class Closed(Exception):
    """The client's ``close`` message: the episode ends."""


class Episode:
    """One connection's environment, answering its messages in order."""

    def __init__(self, env: LoopEnvironment, action_cls: type[Action]) -> None:
        self.env = env
        self.action_cls = action_cls

    async def answer(self, text: str) -> str:
        """The frame that answers one message; ``Closed`` for a ``close``."""
        try:
            message = json.loads(text)  # (its shape is held to the gate's limits before)
        except json.JSONDecodeError as exc:
            return await _error(f"invalid JSON: {exc}", WSErrorCode.INVALID_JSON)
        except (ValueError, RecursionError):  # past limits the gate's are set below
            return await _error("invalid JSON: nested too deep, or a number too long",
                                WSErrorCode.INVALID_JSON)
        if not isinstance(message, dict):
            return await _error('a message is an object: {"type": ..., "data": {...}}',
                                WSErrorCode.INVALID_JSON)
        kind = message.get("type")
        where: tuple[str, ...] = ()  # what a model's errors are fields of
        try:
            match kind:
                case "reset":
                    data = WSResetMessage.model_validate(message).data
                    return await _observation(await self.env.reset_async(**data))
                case "step":
                    data = WSStepMessage.model_validate(message).data
                    where = ("action",)
                    action = self.action_cls.model_validate(data)
                    return await _observation(await self.env.step_async(action))
                case "state":
                    WSStateMessage.model_validate(message)
                    return await _frame("state", self.env.state)
                case "close":
                    WSCloseMessage.model_validate(message)
                    raise Closed
            return await _error(f"type: {_shown(kind)} is not served; an episode's messages "
                                f"are {', '.join(TYPES)}", WSErrorCode.UNKNOWN_TYPE)
        except ValidationError as exc:
            return await _error(format_validation_errors(exc.errors(), where),
                                WSErrorCode.VALIDATION_ERROR,
                                errors=[{"loc": list(e["loc"]), "msg": e["msg"],
                                         "type": e["type"]} for e in exc.errors()])
        except ApiError as exc:
            return await _error(exc.message, WSErrorCode.EXECUTION_ERROR)
        except Closed:
            raise
        except Exception:
            request_id = uuid.uuid4().hex[:16]
            log.exception("environment message %r failed (request id %s)", _shown(kind),
                          request_id)
            return await _error(InternalError(request_id).message,
                                WSErrorCode.EXECUTION_ERROR)


async def serve(websocket: WebSocket, factory: Callable[[], LoopEnvironment],
                action_cls: type[Action]) -> None:
    """The ``/ws`` endpoint: an episode for the connection's life."""
    await websocket.accept()
    episode = Episode(factory(), action_cls)
    try:
        while True:
            frame = await episode.answer(await websocket.receive_text())
            await websocket.send_text(frame)
    except (Closed, WebSocketDisconnect):
        pass
    finally:
        await episode.env.close_async()
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # closed already
            await websocket.close()


def _shown(kind: Any) -> str:
    """``type``'s value as an error names it: a short string quoted, else its JSON kind."""
    if isinstance(kind, str):
        return repr(kind[:40])
    return {dict: "an object", list: "an array", type(None): "missing or null"}.get(
        type(kind), "a " + type(kind).__name__)


async def _observation(observation: Observation) -> str:
    return await asyncio.to_thread(
        lambda: render({"type": "observation", "data": serialize_observation(observation)}))


async def _frame(kind: str, model: BaseModel) -> str:
    return await asyncio.to_thread(
        lambda: render({"type": kind, "data": model.model_dump(mode="json")}))


async def _error(message: str, code: WSErrorCode, **more: Any) -> str:
    return await asyncio.to_thread(
        render, {"type": "error", "data": {"message": message, "code": code.value, **more}})
