"""An environment's HTTP ``/reset`` and ``/step``: the server's own in place of OpenEnv's,
with OpenEnv's wire format (``ResetRequest``/``StepRequest`` in, ``ResetResponse``/
``StepResponse`` out) and its statelessness: each call builds an environment of its own and
ends it. OpenEnv's handlers had FastAPI parse the body and copy it (``model_dump``) on the
event loop (a 3 MB reset held every other caller 0.84 s) and answered a bad action with
pydantic's error list, input and all. Here the body is read as it came (``read_body``),
parsed and validated off the loop when large (``messages``), refused in the server's words
(a 422 naming the field), and the observation rendered on a worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import Action, Observation
from starlette.requests import Request
from starlette.responses import Response

from reward_server.environments import messages
from reward_server.environments.base import LoopEnvironment
from reward_server.json_body import read_body
from reward_server.json_render import render

Endpoint = Callable[[Request], Awaitable[Response]]


def endpoints(factory: Callable[[], LoopEnvironment], action_cls: type[Action]
              ) -> dict[str, Endpoint]:
    """``/reset`` and ``/step`` of an environment made by ``factory``."""

    async def reset(request: Request) -> Response:
        fields = await messages.read(messages.reset_body, await read_body(request))
        env = factory()
        try:
            observation = await env.reset_async(**fields)
        finally:
            await env.close_async()
        return await _rendered(observation)

    async def step(request: Request) -> Response:
        action, timeout_s = await messages.read(messages.step_body, await read_body(request),
                                                action_cls)
        env = factory()
        try:
            observation = await env.step_async(action, timeout_s=timeout_s)
        finally:
            await env.close_async()
        return await _rendered(observation)

    return {"/reset": reset, "/step": step}


async def _rendered(observation: Observation) -> Response:
    text = await asyncio.to_thread(lambda: render(serialize_observation(observation)))
    return Response(text, media_type="application/json")
