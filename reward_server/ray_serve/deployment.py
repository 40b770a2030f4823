"""The reward server as a Ray Serve deployment: each replica builds the same app as
``reward-server`` (``create_app``, its lifespan starting the verifiers' pools in the replica)
and Serve's proxy sends HTTP to it. Python callers on the cluster reach the same app through
a ``DeploymentHandle`` (``rewards``, ``verify``): the request goes through the app's own
routes, limits and auth in the replica's process, so a handle and a URL can never answer
differently.

A replica's sandbox uses the engines the settings name, else its node's own (``DOCKER_HOST``
of the node's ``ray start``, or the local socket), so each node's replica runs code on that
node's engine.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import httpx
import ray
from fastapi import FastAPI
from ray import serve

from reward_server.app import create_app
from reward_server.callers import load_tokens
from reward_server.client import RewardRequestError, RewardServerUnavailable
from reward_server.settings import ServerSettings, settings_class

REPLICA_ROUTE = "/v1/replica"


@serve.ingress()  # the app is built in the replica (__serve_build_asgi_app__), not pickled
class RewardServer:
    """One replica. ``settings`` is the JSON form of the server's settings (validated where
    the app was built, so a bad one stops ``serve run``, not every replica)."""

    async def __init__(self, settings: dict[str, Any]) -> None:
        self.settings: ServerSettings = settings_class(
            settings.get("plugins", ())).model_validate(settings)

    def __serve_build_asgi_app__(self) -> FastAPI:
        self.asgi = create_app(self.settings)
        self.asgi.add_api_route(REPLICA_ROUTE, self.replica, methods=["GET"], tags=["meta"])
        return self.asgi

    def replica(self) -> dict[str, Any]:
        """Where this replica runs: its Ray node and replica ids, host, pid, engine."""
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(),
                "replica_id": serve.get_replica_context().replica_id.unique_id,
                "instance": f"{socket.gethostname()}:{os.getpid()}", "pid": os.getpid(),
                "docker_host": self.settings.model_dump().get("sandbox_docker_host")
                or os.environ.get("DOCKER_HOST")}

    async def rewards(self, items: list[Any], on_invalid: str = "null",
                      caller: str = "ray-handle") -> dict[str, Any]:
        """``POST /v1/rewards`` from a handle: the same JSON answer. ``caller`` is whom the
        fair gates share the workers between (a URL caller is its address) when the server
        has no tokens; with tokens, the first token's name is."""
        return await self._post("/v1/rewards", items, on_invalid, caller)

    async def verify(self, verifier: str, items: list[Any], on_invalid: str = "null",
                     caller: str = "ray-handle") -> dict[str, Any]:
        """``POST /v1/verify/<verifier>`` from a handle."""
        return await self._post(f"/v1/verify/{verifier}", items, on_invalid, caller)

    async def _post(self, path: str, items: list[Any], on_invalid: str,
                    caller: str) -> dict[str, Any]:
        # with tokens, the handle's caller is the first token's name (its ``caller`` is a
        # caller only without them, as a URL client's address is)
        token = load_tokens(self.settings).first()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        transport = httpx.ASGITransport(app=self.asgi, client=(caller, 0))
        headers["content-type"] = "application/json"
        # ASCII JSON, as the client sends it: a lone surrogate in a completion stays escaped
        body = json.dumps({"items": items}).encode("ascii")
        async with httpx.AsyncClient(transport=transport, base_url="http://replica",
                                     headers=headers, timeout=None) as client:
            response = await client.post(path, content=body, params={"on_invalid": on_invalid})
        if response.status_code == 200:
            return response.json()
        if response.status_code == 429 or response.status_code >= 500:
            raise RewardServerUnavailable(f"HTTP {response.status_code}: {response.text[:500]}")
        detail = response.json().get("detail", response.text)  # the caller's mistake
        raise RewardRequestError(response.status_code, str(detail))
