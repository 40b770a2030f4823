"""Optional bearer-token auth: every route but /healthz needs the token when one is set."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from reward_server.client import RewardClient, RewardRequestError
from tests.conftest import ServerProcess, run_server

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("auth"),
                    env={"REWARD_SERVER_API_TOKEN": TOKEN}) as srv:
        yield srv


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/verifiers"), ("GET", "/metrics"), ("GET", "/docs"), ("GET", "/openapi.json"),
     ("POST", "/v1/rewards"), ("POST", "/v1/verify/math"), ("GET", "/nope")],
)
def test_routes_need_the_token(secured: ServerProcess, method: str, path: str) -> None:
    r = httpx.request(method, secured.url + path, json={"items": []})
    assert r.status_code == 401
    assert "Bearer <token>" in r.json()["detail"] and "HTTP Basic" in r.json()["detail"]
    wrong = httpx.request(method, secured.url + path, json={"items": []},
                          headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    right = httpx.request(method, secured.url + path, json={"items": []},
                          headers={"Authorization": f"Bearer {TOKEN}"})
    assert right.status_code != 401


def test_healthz_is_open(secured: ServerProcess) -> None:
    assert httpx.get(secured.url + "/healthz").status_code == 200


def test_client_sends_the_token(secured: ServerProcess) -> None:
    with RewardClient(secured.url, token=TOKEN) as client:
        out = client.rewards([{"verifier": "math", "response": "\\boxed{1}", "answer": "1"}])
        assert out.rewards == [1.0]
    with RewardClient(secured.url) as client, pytest.raises(RewardRequestError) as err:
        client.verifiers()
    assert err.value.status_code == 401
