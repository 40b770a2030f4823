"""OpenEnv clients of a test server's environments (reward_server/environments), as a user
holds them: OpenEnv's own ``EnvClient`` over its WebSocket transport, as a caller at an
address the server's trusted proxy names (X-Forwarded-For from loopback)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from reward_server.environments.client import CodeInterpreterEnv, VerifierEnv
from reward_server.testing import ServerProcess, run_server
from tests.helpers.metrics import metric
from tests.helpers.waiting import eventually

CODE, VERIFIER = "/v1/environments/code", "/v1/environments/verifier"


def caller_headers(address: str | None, token: str | None = None) -> dict[str, str]:
    """A caller named by the proxy (``address``; None: the loopback client itself)."""
    headers = {} if address is None else {"X-Forwarded-For": address}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def socket(srv: ServerProcess, path: str, token: str | None, retry: bool = True,
           **kwargs: Any) -> Any:
    """A bare WebSocket to ``path`` (OpenEnv's client would hide a close and reconnect),
    once a place is free: a closed connection frees its place (and the bytes it held of its
    caller's) once the server has seen the close, a moment after the client returns."""
    url = srv.url.replace("http://", "ws://") + path
    sockets: list[Any] = []

    def attempt() -> bool:
        try:
            sockets.append(connect(url, additional_headers=caller_headers(None, token),
                                   open_timeout=30, **kwargs))
            return True
        except InvalidStatus as exc:
            if exc.response.status_code != 429 or not retry:
                raise
            return False

    eventually(attempt, 30, "a place freed")
    return sockets[-1]


def code_env(srv: ServerProcess, address: str | None = None, **kwargs: Any) -> Any:
    """A synchronous ``CodeInterpreterEnv`` (connects on ``with``)."""
    return CodeInterpreterEnv(base_url=srv.url + CODE, headers=caller_headers(address),
                              message_timeout_s=120, **kwargs).sync()


def verifier_env(srv: ServerProcess, address: str | None = None, token: str | None = None,
                 **kwargs: Any) -> Any:
    return VerifierEnv(base_url=srv.url + VERIFIER, headers=caller_headers(address, token),
                       message_timeout_s=120, **kwargs).sync()


def sessions_of(srv: ServerProcess, address: str | None = None) -> list[dict[str, Any]]:
    """The caller's open ``/v1/sessions`` (an episode's interpreter is one)."""
    r = httpx.get(srv.url + "/v1/sessions", headers=caller_headers(address), timeout=60)
    r.raise_for_status()
    return r.json()


def all_removed(srv: ServerProcess, *addresses: str | None) -> bool:
    """These callers' sessions closed (None: the loopback client), and every ended
    session's container removed: a closed session counts against its caller's caps until
    its container is, in its caller's turn at the sandbox's gate (docs/sessions.md)."""
    return (all(sessions_of(srv, address) == [] for address in addresses)
            and metric(srv.url, "reward_sessions_removing") == 0)


@contextlib.contextmanager
def server_with_callers(path: Path, settings: dict[str, str], tokens: dict[str, str]
                        ) -> Iterator[ServerProcess]:
    """A server whose token file names more callers (``tokens``: name -> token) besides
    the one ``settings`` may give."""
    file = path / "tokens"
    file.write_text("".join(f"{name}:{token}\n" for name, token in tokens.items()))
    file.chmod(0o600)
    with run_server(path, env={**settings, "REWARD_SERVER_API_TOKENS_FILE": str(file)}
                    ) as server:
        yield server
