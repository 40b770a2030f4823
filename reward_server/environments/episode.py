"""An episode over the WebSocket (``/ws``): the server's own endpoint in place of OpenEnv's,
speaking OpenEnv's wire format (``WSResetMessage`` ... ``WSErrorResponse``, its error codes)
so that its ``EnvClient`` connects unchanged. What OpenEnv's endpoint did that no door
in front of it (``gate``) could change:

- **only an episode's messages**: ``reset``, ``step``, ``state`` and ``close``, which are what
  ``EnvClient`` sends. OpenEnv's also served ``mcp`` (JSON-RPC to tools, and sessions of its
  own); any type but these four is an error frame naming ``type``, and the episode goes on.
- **messages read off the loop**: a large message is parsed and validated on a worker
  thread (``messages``), as the verifier's reset validates its item.
- **frames rendered off the loop**: OpenEnv rendered an observation on the event loop
  (``model_dump_json``: a 13 MiB cell's output held every other caller 46-119 ms). Here a
  frame is rendered on a worker thread a piece at a time (``json_render``); the loop hands
  the text to the socket.
- **errors in the server's words**: an ``ApiError``'s message (the field, the limit), a
  model's errors by field without the input, JSON that does not parse by where; anything
  else is a bug, logged with an id that the frame names, never Python's own text (OpenEnv
  sent ``str(exc)`` of whatever was raised, ``JSONDecodeError``'s included).

An episode is its connection: the environment is made when it opens and ended when it closes
(the client's close, a dropped connection, or the gate's idle limit), with no registry of
sessions outliving a connection to cap or reap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import Action, Observation, WSErrorCode
from pydantic import BaseModel
from starlette.websockets import WebSocket, WebSocketDisconnect

from reward_server.environments import messages
from reward_server.environments.base import LoopEnvironment
from reward_server.errors import ApiError, InternalError
from reward_server.json_render import render

log = logging.getLogger("reward_server")


class Closed(Exception):
    """The client's ``close`` message: the episode ends."""


class Episode:
    """One connection's environment, answering its messages in order."""

    def __init__(self, env: LoopEnvironment, action_cls: type[Action]) -> None:
        self.env = env
        self.action_cls = action_cls

    async def answer(self, text: str) -> str:
        """The frame that answers one message; ``Closed`` for a ``close``. The message is
        parsed and validated off the loop when it is large (its shape is held to the gate's
        limits before)."""
        kind: Any = None
        try:
            kind, data = await messages.read(messages.message, text, self.action_cls)
            match kind:
                case "reset":
                    return await _observation(await self.env.reset_async(**data))
                case "step":
                    return await _observation(await self.env.step_async(data))
                case "state":
                    return await _frame("state", self.env.state)
            raise Closed
        except messages.Malformed as exc:
            return await _error(exc.message, WSErrorCode.INVALID_JSON)
        except messages.Unserved as exc:
            return await _error(exc.message, WSErrorCode.UNKNOWN_TYPE)
        except messages.InvalidFields as exc:
            return await _error(exc.message, WSErrorCode.VALIDATION_ERROR, errors=exc.errors)
        except ApiError as exc:
            return await _error(exc.message, WSErrorCode.EXECUTION_ERROR)
        except Closed:
            raise
        except Exception:
            request_id = uuid.uuid4().hex[:16]
            log.exception("environment message %r failed (request id %s)",
                          messages.shown(kind), request_id)
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


async def _observation(observation: Observation) -> str:
    return await asyncio.to_thread(
        lambda: render({"type": "observation", "data": serialize_observation(observation)}))


async def _frame(kind: str, model: BaseModel) -> str:
    return await asyncio.to_thread(
        lambda: render({"type": kind, "data": model.model_dump(mode="json")}))


async def _error(message: str, code: WSErrorCode, **more: Any) -> str:
    return await asyncio.to_thread(
        render, {"type": "error", "data": {"message": message, "code": code.value, **more}})
