"""The code verifier through a real server: a server whose sandbox answers, and
``POST /v1/verify/code``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from reward_server.testing import ServerProcess, run_server, wait_for_sandbox

# A client's wait for one batch: only a hang reaches it (a batch of 328 HumanEval items, on a
# loaded machine, takes minutes)
TIMEOUT_S = 600.0


@contextmanager
def code_server(path: Path, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """``run_server(path, env)``, once its sandbox answers (a container is warm)."""
    with run_server(path, env=env) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        yield server


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
