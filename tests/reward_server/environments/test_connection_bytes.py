"""What an environment's connections hold of their caller's bytes (reward_server/environments/
gate.py): each open connection the largest message it may be sent (what the WebSocket
library reads ahead of the app, or is reading) and the message in hand, counted against
``max_body_bytes_per_caller`` with the caller's request bodies. Without it eight connections,
each with a slow step running and a 24 MB message queued behind it, held 52 MB of the
server's memory apiece that no cap counted. No Docker: the verifier environment only."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.conftest import ServerProcess
from tests.helpers.environments import VERIFIER, caller_headers, server_with_callers, socket

TOKEN, SECOND = "bytes-test-token", "bytes-second-token"
FIELD_BYTES = 4096
MESSAGE = 6 * FIELD_BYTES + 64 * 1024  # the largest message a connection may be sent
CAP = 3 * MESSAGE + MESSAGE // 2  # three connections, and half a message besides
SETTINGS = {"REWARD_SERVER_API_TOKEN": TOKEN,
            "REWARD_SERVER_MAX_FIELD_BYTES": str(FIELD_BYTES),
            "REWARD_SERVER_MAX_BODY_BYTES_PER_CALLER": str(CAP),
            "REWARD_SERVER_OPENENV_MAX_PER_CALLER": "8",
            "REWARD_SERVER_SANDBOX_DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with server_with_callers(tmp_path_factory.mktemp("connection-bytes"), SETTINGS,
                             {"second": SECOND}) as server:
        yield server


def ws_url(srv: ServerProcess) -> str:
    return srv.url.replace("http://", "ws://") + VERIFIER + "/ws"


def opened(srv: ServerProcess, token: str = TOKEN) -> Any:
    return socket(srv, VERIFIER + "/ws", token)


def reset(padding: int) -> str:
    """A reset whose unknown field pads it to about ``padding`` characters: answered with
    an error frame naming the field, after the gate has counted it."""
    return json.dumps({"type": "reset", "data": {"verifier": "math", "item": {"answer": "1"},
                                                 "pad": "x" * padding}})


def test_each_connection_holds_its_largest_message_of_the_callers_bytes(
        srv: ServerProcess) -> None:
    held = [contextlib.ExitStack() for _ in range(3)]
    try:
        for stack in held:
            stack.enter_context(opened(srv))
        with pytest.raises(InvalidStatus) as refused, connect(
                ws_url(srv), open_timeout=30, additional_headers=caller_headers(None, TOKEN)):
            pass
        assert refused.value.response.status_code == 429
        assert b"max_body_bytes_per_caller" in refused.value.response.body
        assert refused.value.response.headers["Retry-After"]
        with opened(srv, SECOND):  # another caller's bytes are its own
            pass
        # the connections count against the caller's request bodies too
        r = httpx.post(srv.url + "/v1/verify/math", headers=caller_headers(None, TOKEN),
                       json={"items": [{"answer": "1", "response": "1", "x": "y" * MESSAGE}]},
                       timeout=60)
        assert r.status_code == 429 and "max_body_bytes_per_caller" in r.text, r.text
        held[0].close()
        held[0].enter_context(opened(srv))  # a closed connection's bytes are given back
    finally:
        for stack in held:
            stack.close()


def test_the_message_in_hand_counts_too(srv: ServerProcess) -> None:
    """Three connections hold three messages' bytes; a message of less than the half
    message left is answered, one of more closes its connection (1013, try again later)."""
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(opened(srv)) for _ in range(3)]
        held[0].send(reset(MESSAGE // 4))
        frame = json.loads(held[0].recv(timeout=60))
        assert frame["type"] == "error" and "reset.pad" in frame["data"]["message"], frame
        with pytest.raises(ConnectionClosed) as closed:
            held[1].send(reset(MESSAGE * 3 // 4))
            held[1].recv(timeout=60)
        assert closed.value.rcvd.code == 1013, closed.value.rcvd
        assert "max_body_bytes_per_caller" in closed.value.rcvd.reason, closed.value.rcvd
        held[0].send(reset(MESSAGE // 4))  # the first message's bytes were given back
        assert json.loads(held[0].recv(timeout=60))["type"] == "error"
