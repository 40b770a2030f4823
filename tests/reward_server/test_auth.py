"""Optional bearer-token auth: every route but /healthz needs a token when any is set: the
one of REWARD_SERVER_API_TOKEN (or the flag) and each team's of the tokens file."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reward_server.client import RewardClient, RewardRequestError
from tests.conftest import ServerProcess, run_server
from tests.helpers.auth import tokens_file

TOKEN = "s3cret-token"
TEAMS = {"team-a": "alpha-0123456789", "team-b": "beta:with:colons"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("auth")
    with run_server(path, env={"REWARD_SERVER_API_TOKEN": TOKEN,
                               "REWARD_SERVER_API_TOKENS_FILE": str(
                                   tokens_file(path / "tokens", TEAMS))}) as srv:
        yield srv


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/verifiers"), ("GET", "/metrics"), ("GET", "/docs"), ("GET", "/openapi.json"),
     ("POST", "/v1/rewards"), ("POST", "/v1/verify/math"), ("GET", "/nope")],
)
def test_routes_need_the_token(secured: ServerProcess, method: str, path: str) -> None:
    r = httpx.request(method, secured.url + path, json={"items": []}, timeout=60)
    assert r.status_code == 401
    assert "Bearer <token>" in r.json()["detail"] and "HTTP Basic" in r.json()["detail"]
    wrong = httpx.request(method, secured.url + path, json={"items": []},
                          headers={"Authorization": "Bearer nope"}, timeout=60)
    assert wrong.status_code == 401
    right = httpx.request(method, secured.url + path, json={"items": []},
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert right.status_code != 401


def test_healthz_is_open(secured: ServerProcess) -> None:
    assert httpx.get(secured.url + "/healthz", timeout=60).status_code == 200


def test_client_sends_the_token(secured: ServerProcess) -> None:
    with RewardClient(secured.url, token=TOKEN) as client:
        out = client.rewards([{"verifier": "math", "response": "\\boxed{1}", "answer": "1"}])
        assert out.rewards == [1.0]
    with RewardClient(secured.url) as client, pytest.raises(RewardRequestError) as err:
        client.verifiers()
    assert err.value.status_code == 401


@pytest.mark.parametrize("team", sorted(TEAMS))
def test_each_teams_token_is_taken(secured: ServerProcess, team: str) -> None:
    token = TEAMS[team]
    bearer = httpx.get(secured.url + "/v1/verifiers", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert bearer.status_code == 200, bearer.text
    basic = httpx.get(secured.url + "/v1/verifiers", auth=("anyone", token), timeout=60)
    assert basic.status_code == 200, basic.text
    for wrong in (token[:-1], token + "x", f"{TOKEN}{token}", team):
        r = httpx.get(secured.url + "/v1/verifiers", headers={"Authorization": f"Bearer {wrong}"}, timeout=60)
        assert r.status_code == 401, wrong
    no_colon = base64.b64encode(token.encode()).decode()  # Basic needs user:password
    r = httpx.get(secured.url + "/v1/verifiers", headers={"Authorization": f"Basic {no_colon}"}, timeout=60)
    assert r.status_code == 401


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REWARD_SERVER_")}
    return subprocess.run([sys.executable, "-m", "reward_server.cli", "--port", "1", *args],
                          capture_output=True, text=True, timeout=120, env={**clean, **(env or {})})


def test_a_bad_tokens_file_stops_the_server_in_one_line(tmp_path: Path) -> None:
    """A malformed file, or one with no token, is refused before the server starts (an empty
    file must not open the server to everyone); the message names the line, not the token."""
    bad = tmp_path / "bad"
    bad.write_text("team-a:fine-token\nsecret-without-a-name\n")
    out = _cli("--api-tokens-file", str(bad))
    assert out.returncode == 2 and "line 2: not 'name:token'" in out.stderr, out.stderr
    assert "secret-without-a-name" not in out.stderr + out.stdout
    empty = tmp_path / "empty"
    empty.write_text("# nobody yet\n")
    out = _cli(env={"REWARD_SERVER_API_TOKENS_FILE": str(empty)})
    assert out.returncode == 2 and "holds no 'name:token' line" in out.stderr, out.stderr
