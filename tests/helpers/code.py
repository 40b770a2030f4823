"""The code verifier through a real server: a server whose sandbox answers (one module's,
once per sandbox runtime), and ``POST /v1/verify/code``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from reward_server.testing import ServerProcess, run_server, wait_for_sandbox

if TYPE_CHECKING:
    from tests.conftest import SandboxRuntime

# A client's wait for one batch: only a hang reaches it (a batch of 328 HumanEval items, on a
# loaded machine, takes minutes)
TIMEOUT_S = 600.0
# One container, nothing cached: every item runs, and meets what the one before it left
ONE_CONTAINER = {"REWARD_SERVER_SANDBOX_POOL_SIZE": "1", "REWARD_SERVER_CACHE_SIZE": "0"}


@contextmanager
def code_server(path: Path, env: dict[str, str] | None = None,
                startup_s: float = 60) -> Iterator[ServerProcess]:
    """``run_server(path, env)``, once its sandbox answers (a container is warm)."""
    with run_server(path, env=env, startup_s=startup_s) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        yield server


def sandbox_server(name: str, env: dict[str, str] | None = None, startup_s: float = 60):
    """A module's server fixture, ``srv = sandbox_server(name, env)``: a ``code_server`` with
    ``env`` under each sandbox runtime in turn (runc, then gVisor: tests/conftest.py's
    ``sandbox_runtime``), in a directory of its own named after both. The settings are what
    differs between the modules that run their items under both runtimes."""

    @pytest.fixture(scope="module")
    def srv(tmp_path_factory: pytest.TempPathFactory,
            sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
        with code_server(tmp_path_factory.mktemp(f"{name}-{sandbox_runtime.name}"),
                         {**sandbox_runtime.env, **(env or {})}, startup_s) as server:
            yield server

    return srv


def code_client(server: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=TIMEOUT_S)


def verify(to: httpx.Client | ServerProcess, *items: dict[str, Any],
           ascii_json: bool = False) -> list[dict[str, Any]]:
    """``POST /v1/verify/code`` with ``items`` (through a client, or a new one to a server);
    the results, a 200 asserted. ``ascii_json``: the body as ``json.dumps`` writes it, with
    ASCII escapes, so that a lone surrogate in a program travels as ``\\ud800``."""
    payload = {"items": list(items)}
    body: dict[str, Any] = ({"content": json.dumps(payload),
                             "headers": {"content-type": "application/json"}}
                            if ascii_json else {"json": payload})
    if isinstance(to, httpx.Client):
        r = to.post("/v1/verify/code", **body)
    else:
        with code_client(to) as client:
            r = client.post("/v1/verify/code", **body)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def verify_one(to: httpx.Client | ServerProcess, item: dict[str, Any] | None = None, /, *,
               ascii_json: bool = False, **fields: Any) -> dict[str, Any]:
    """The result of one item: ``item`` and ``fields`` together."""
    (result,) = verify(to, {**(item or {}), **fields}, ascii_json=ascii_json)
    return result
