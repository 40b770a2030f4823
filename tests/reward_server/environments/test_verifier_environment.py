"""The verifier environment (``/v1/environments/verifier``) driven by OpenEnv's own client over
its WebSocket transport against the real server on loopback: the reward is the verifier's
score with its status (the same result ``/v1/verify/<name>`` gives, null when unscorable),
bad input is a 4xx naming the field, and the door in front of it (reward_server/environments/
gate.py) holds: the server's token, the caps on connections, the idle limit, the message
limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from reward_server.environments.models import VerifierAction
from tests.conftest import ServerProcess
from tests.helpers.environments import (
    VERIFIER,
    caller_headers,
    server_with_callers,
    socket,
    verifier_env,
)
from tests.helpers.waiting import eventually

TOKEN, SECOND, THIRD = "environments-test-token", "second-callers-token", "third-callers-token"
FIELD_BYTES = 4096
SETTINGS = {"REWARD_SERVER_API_TOKEN": TOKEN,  # and two more callers' (the fixture's file)
            "REWARD_SERVER_MAX_FIELD_BYTES": str(FIELD_BYTES),
            "REWARD_SERVER_OPENENV_MAX_PER_CALLER": "2",
            "REWARD_SERVER_OPENENV_MAX_OPEN": "3",
            "REWARD_SERVER_OPENENV_IDLE_S": "2",
            "REWARD_SERVER_FORMAT_MAX_RULES": "2",  # a verifier's cap, from its section
            # an engine that is not there: a code item cannot be scored, for no fault of its
            # response
            "REWARD_SERVER_SANDBOX_DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with server_with_callers(tmp_path_factory.mktemp("verifier-env"), SETTINGS, {"second": SECOND, "third": THIRD}) as server:
        yield server


def env(srv: ServerProcess, token: str = TOKEN, **kwargs: Any) -> Any:
    return verifier_env(srv, token=token, **kwargs)


def connected(srv: ServerProcess, token: str = TOKEN) -> Any:
    """A connected client, once a place is free: a closed connection frees its place when
    the server has seen the close, a moment after the client returns."""
    clients: list[Any] = []

    def attempt() -> bool:
        clients.append(env(srv, token))
        try:
            clients[-1].connect()
            return True
        except ConnectionError as exc:
            if "HTTP 429" not in str(exc):
                raise
            return False

    eventually(attempt, 30, "a place freed")
    return clients[-1]


def scored(srv: ServerProcess, verifier: str, item: dict[str, Any], response: str) -> Any:
    with env(srv) as e:
        assert e.reset(verifier=verifier, item=item).observation.status == "ready"
        return e.step(VerifierAction(response=response))


@pytest.mark.parametrize("verifier, item, response, reward, status", [
    ("math", {"answer": "42"}, "so \\boxed{42}", 1.0, "ok"),
    ("math", {"answer": "42"}, "so \\boxed{41}", 0.0, "ok"),
    ("format", {"rules": ["think_answer"]}, "<think>\na\n</think>\n<answer>\nb\n</answer>",
     1.0, "ok"),
    ("code", {"tests": [{"input": "", "output": "1\n"}]}, "print(1)", None,
     "sandbox_unavailable"),
])
def test_the_reward_is_the_verifiers_score(srv: ServerProcess, verifier: str,
                                           item: dict[str, Any], response: str,
                                           reward: float | None, status: str) -> None:
    result = scored(srv, verifier, item, response)
    assert (result.reward, result.observation.status, result.done) == (reward, status, True)
    r = httpx.post(f"{srv.url}/v1/verify/{verifier}", timeout=60,
                   json={"items": [{**item, "response": response}]},
                   headers=caller_headers(None, TOKEN))
    assert result.observation.result == r.json()["results"][0]  # what the API says, whole
    assert result.observation.provenance == r.json()["provenance"]  # and what produced it
    assert result.observation.provenance["verifier"] == verifier


def test_one_answer_per_episode(srv: ServerProcess) -> None:
    with env(srv) as e:
        e.reset(verifier="math", item={"answer": "2"})
        assert e.step(VerifierAction(response="2")).reward == 1.0
        with pytest.raises(RuntimeError, match="scored; reset"):
            e.step(VerifierAction(response="2"))
        e.reset(verifier="math", item={"answer": "3"})
        assert e.step(VerifierAction(response="2")).reward == 0.0
        assert e.state().step_count == 1 and e.state().verifier == "math"


def test_bad_input_is_refused_naming_the_field(srv: ServerProcess) -> None:
    with env(srv) as e:
        for reset, field in [({}, "reset.verifier"),
                             ({"verifier": "nope"}, "known verifiers: code"),
                             ({"verifier": "math", "item": {"answr": "1"}}, "reset.item.answr"),
                             ({"verifier": "math", "item": ["1"]}, "reset.item"),
                             ({"verifier": "math", "item": {"answer": "1", "response": "x"}},
                              "reset.item.response"),
                             ({"verifier": "math", "seed": 1, "bogus": 1}, "reset.bogus")]:
            with pytest.raises(RuntimeError, match="Server error") as raised:
                e.reset(**reset)
            assert field in str(raised.value), (reset, raised.value)
        with pytest.raises(RuntimeError, match="action: no item to score"):
            e.step(VerifierAction(response="1"))
        e.reset(verifier="math", item={"answer": "1"})
        with pytest.raises(RuntimeError, match=f"action.response: .*{FIELD_BYTES}"):
            e.step(VerifierAction(response="1" * (FIELD_BYTES + 1)))
        assert e.step(VerifierAction(response="1")).reward == 1.0  # the episode goes on
    with httpx.Client(base_url=srv.url + VERIFIER, timeout=60,
                      headers=caller_headers(None, TOKEN)) as http:
        r = http.post("/reset", json={"verifier": "math", "item": {"answr": "1"}})
        assert r.status_code == 422 and "reset.item.answr" in r.json()["detail"], r.text
        r = http.post("/reset", json={"verifier": "nope"})
        assert r.status_code == 404, r.text
        r = http.post("/step", json={"action": {"respons": "1"}})
        assert r.status_code == 422 and "action.respons: " in r.json()["detail"], r.text
        r = http.post("/step", json={"action": {"response": "1"}})
        assert r.status_code == 422 and "reset(verifier=" in r.json()["detail"], r.text


@pytest.mark.parametrize("item, refusal", [
    # past the server's field limit: refused at step, the reset had taken it
    ({"answer": "1" * (FIELD_BYTES + 1)},
     f"reset.item.answer: {FIELD_BYTES + 1} bytes exceed the limit of {FIELD_BYTES}"),
    # past a verifier's cap from the server's settings: the reset checked the default's (16)
    ({"rules": ["think_answer"] * 3}, "REWARD_SERVER_FORMAT_MAX_RULES"),
])
def test_a_reset_admits_the_item_as_a_step_would(srv: ServerProcess, item: dict[str, Any],
                                                 refusal: str) -> None:
    """What the step would refuse is refused at the reset, naming the field: the reset
    admits the item as /v1/verify does, with the server's settings."""
    verifier = "format" if "rules" in item else "math"
    with env(srv) as e:
        with pytest.raises(RuntimeError, match="Server error") as raised:
            e.reset(verifier=verifier, item=item)
        assert refusal in str(raised.value), raised.value
    r = httpx.post(srv.url + VERIFIER + "/reset", json={"verifier": verifier, "item": item},
                   headers=caller_headers(None, TOKEN), timeout=60)
    assert r.status_code == (413 if "answer" in item else 422), r.text
    assert refusal in r.json()["detail"], r.text


def test_a_caller_needs_the_servers_token(srv: ServerProcess) -> None:
    with pytest.raises(ConnectionError, match="HTTP 401"):
        verifier_env(srv).connect()
    with pytest.raises(ConnectionError, match="HTTP 401"):
        verifier_env(srv, token="wrong").connect()
    r = httpx.post(srv.url + VERIFIER + "/reset", json={"verifier": "math"}, timeout=60)
    assert r.status_code == 401


def test_connections_are_capped_per_caller_and_in_all(srv: ServerProcess) -> None:
    """A caller (a token's name) holds 2 connections, the server 3; past either the
    handshake is refused with a 429 naming the setting; a closed one's place is free."""
    held = [env(srv) for _ in range(2)]
    try:
        for e in held:
            e.connect()
        with pytest.raises(ConnectionError, match="HTTP 429"):
            env(srv).connect()
        held.append(env(srv, SECOND))
        held[-1].connect()  # another caller: the third place
        r = httpx.get(srv.url + VERIFIER + "/ws", timeout=60, headers={
            **caller_headers(None, THIRD), "Connection": "Upgrade", "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
        assert r.status_code == 429 and "openenv_max_open=3" in r.json()["detail"], r.text
        held.pop(0).close()
        again = connected(srv, THIRD)  # a closed connection's place is free again
        held.append(again)
        again.reset(verifier="math", item={"answer": "1"})
        assert again.step(VerifierAction(response="1")).reward == 1.0
    finally:
        for e in held:
            e.close()


def _raw(srv: ServerProcess) -> Any:
    return socket(srv, VERIFIER + "/ws", TOKEN)


def test_an_idle_connection_is_closed_and_its_place_freed(srv: ServerProcess) -> None:
    with _raw(srv) as ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=60)  # nothing sent: the server ends it after openenv_idle_s
    assert closed.value.rcvd.code == 1001 and "openenv_idle_s" in closed.value.rcvd.reason
    held: list[Any] = []
    try:
        held += [connected(srv), connected(srv)]  # both of the caller's places are free
    finally:
        for e in held:
            e.close()


def test_a_message_past_the_limit_closes_the_connection(srv: ServerProcess) -> None:
    """Refused by the WebSocket library from the frame's header, before it buffers the
    message: the library read one of up to twice the limit ahead of the app, memory no
    cap counted."""
    limit = 6 * FIELD_BYTES + 64 * 1024  # one field's worst escaping, and an envelope
    with _raw(srv) as ws, pytest.raises(ConnectionClosed) as closed:
        ws.send('{"type": "step", "data": {"response": "' + "x" * limit + '"}}')
        ws.recv(timeout=60)
    assert closed.value.rcvd.code == 1009, closed.value.rcvd
    assert f"exceeds limit of {limit} bytes" in closed.value.rcvd.reason, closed.value.rcvd
