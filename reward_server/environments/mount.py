"""The OpenEnv environments mounted into the reward server's own app (docs/environments.md):

    /v1/environments/code       the code interpreter (``code.CodeInterpreterEnvironment``)
    /v1/environments/verifier   any registered verifier (``verifier.VerifierEnvironment``)

Each is OpenEnv's own server (``HTTPEnvServer``: ``/reset``, ``/step``, ``/state``,
``/schema``, ``/health``, ...) registered on a sub-app, with its ``/ws`` replaced by the
server's (``episode``: the same wire format, an episode's messages only, frames rendered off
the loop) and its ``/reset`` and ``/step`` too (``stateless``: bodies read off the loop,
errors in the server's words), so an OpenEnv client connects unchanged with
``base_url="http://host:8000/v1/environments/code"``.

Why mounted, not an OpenEnv app of its own that calls the server over HTTP: one command
(``reward-server``) serves it, and the environments are the server's sessions and scorer
themselves, not a client of them. A second process would hold its own connections, put its
own address in front of every caller (so every caller would be one to the caps and fair
gates, or would need a forwarded identity to trust), add a hop to each step, and need its own
reaping of what its clients leave. Mounted, the server's token auth, callers, caps, fair
gates, reaper, metrics and shutdown apply as they are; the ``gate`` adds what a connection
needs besides (its caller, a cap on connections, an idle limit, a message limit)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, WebSocket
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.types import Action, Observation, State

from reward_server.environments import episode, stateless
from reward_server.environments.base import LoopEnvironment
from reward_server.environments.code import CodeInterpreterEnvironment
from reward_server.environments.gate import EnvironmentGate, Places, max_message_bytes
from reward_server.environments.models import (
    CodeAction,
    CodeObservation,
    CodeState,
    VerifierAction,
    VerifierObservation,
    VerifierState,
)
from reward_server.environments.verifier import VerifierEnvironment
from reward_server.errors import EXCEPTION_HANDLERS
from reward_server.settings import ServerSettings

PREFIX = "/v1/environments"


def mount_environments(app: FastAPI, settings: ServerSettings) -> list[str]:
    """Mount both environments under ``PREFIX``; the paths mounted."""
    state = app.state  # the lifespan sets sessions and scorer before the first connection
    places = Places()  # one count for both: the caps are the server's, not each mount's
    mounted = []
    for name, factory, action, observation, env_state in [
        ("code", lambda: CodeInterpreterEnvironment(lambda: state.sessions,
                                                    lambda: state.provenance),
         CodeAction, CodeObservation, CodeState),
        ("verifier", lambda: VerifierEnvironment(lambda: state.scorer,
                                                  lambda: state.provenance),
         VerifierAction, VerifierObservation, VerifierState),
    ]:
        path = f"{PREFIX}/{name}"
        app.mount(path, _environment_app(name, factory, action, observation, env_state,
                                         settings, places))
        mounted.append(path)
    return mounted


def _environment_app(name: str, factory: Callable[[], LoopEnvironment], action: type[Action],
                     observation: type[Observation], state: type[State],
                     settings: ServerSettings, places: Places) -> EnvironmentGate:
    # no /docs of its own: FastAPI's loads Swagger UI from a CDN (the server's is offline)
    sub = FastAPI(title=f"OpenEnv environment: {name}", docs_url=None, redoc_url=None,
                  exception_handlers=EXCEPTION_HANDLERS)
    # OpenEnv's sessions (its /ws's and /mcp's, capped and reaped by it) are never made: the
    # gate caps connections and ends idle ones, and an episode ends with its connection
    HTTPEnvServer(factory, action, observation, env_name=name, state_cls=state
                  ).register_routes(sub)
    # an episode's /ws, and /reset and /step, are the server's own (episode, stateless)
    own = stateless.endpoints(factory, action)
    sub.router.routes = [route for route in sub.router.routes
                         if getattr(route, "path", None) not in {"/ws", *own}]
    for path, endpoint in own.items():
        sub.router.add_route(path, endpoint, methods=["POST"])

    async def serve_episode(websocket: WebSocket) -> None:
        await episode.serve(websocket, factory, action)

    sub.add_api_websocket_route("/ws", serve_episode)
    # the code environment's reset is a /v1/sessions body: the sandbox routes' tighter limit
    values, values_setting = ((settings.max_sandbox_json_values, "max_sandbox_json_values")
                              if name == "code" else
                              (settings.max_json_values, "max_json_values"))
    return EnvironmentGate(
        sub, places=places, per_caller=settings.openenv_max_per_caller,
        max_open=settings.openenv_max_open, idle_s=settings.openenv_idle_s,
        max_message_bytes=max_message_bytes(settings),
        max_containers=settings.max_json_containers, max_values=values,
        values_setting=values_setting, max_depth=settings.openenv_max_json_depth,
        max_number_chars=settings.openenv_max_json_number_chars)
