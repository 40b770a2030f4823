"""Admission control on a real server: a caller past its cap on requests or items in flight
is answered 429 at once with Retry-After, naming the setting, while another caller is
served; a request no cap could ever take is a 413; room comes back when the caller's work is
answered; /metrics shows what each caller holds and how long its items waited.

Callers are two tokens. Caller A holds the one math worker with towers of exponents that run
into the time limit; everything is read from answers and metrics, not the clock."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from reward_server.testing import ServerProcess, run_server
from tests.helpers.auth import tokens_file
from tests.helpers.items import towers

TEAMS = {"team-a": "alpha-0123456789", "team-b": "beta-0123456789"}
A = {"Authorization": f"Bearer {TEAMS['team-a']}"}
B = {"Authorization": f"Bearer {TEAMS['team-b']}"}
PLAIN = {"response": "\\boxed{4}", "answer": "4"}


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp("quotas")
    env = {"REWARD_SERVER_API_TOKENS_FILE": str(tokens_file(path / "tokens", TEAMS)),
           "REWARD_SERVER_MAX_REQUESTS_PER_CALLER": "3",
           "REWARD_SERVER_MAX_ITEMS_PER_CALLER": "6", "REWARD_SERVER_MATH_WORKERS": "1",
           "REWARD_SERVER_MATH_TIMEOUT_S": "2", "REWARD_SERVER_CACHE_SIZE": "0",
           "REWARD_SERVER_REQUEST_BUDGET_S": "0",
           "REWARD_SERVER_MAX_BODY_BYTES_PER_CALLER": str(64 * 1024)}
    with run_server(path, env=env) as srv:
        warm = httpx.post(srv.url + "/v1/verify/math", json={"items": [PLAIN]}, headers=B,
                          timeout=120)
        assert warm.status_code == 200
        yield srv


def gauge(url: str, name: str, caller: str) -> float:
    text = httpx.get(url + "/metrics", headers=B, timeout=30).text
    match = re.search(rf'^{name}{{caller="{caller}"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def until(check: object, what: str, within_s: float = 120) -> None:
    deadline = time.monotonic() + within_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def post(url: str, items: list, headers: dict, out: list) -> threading.Thread:
    def run() -> None:
        out.append(httpx.post(url + "/v1/verify/math", json={"items": items}, headers=headers,
                              timeout=300))
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_caller_past_its_caps_is_told_when_to_come_back(capped: ServerProcess) -> None:
    url = capped.url
    math_a = lambda items: httpx.post(url + "/v1/verify/math",  # noqa: E731
                                      json={"items": items}, headers=A, timeout=300)
    held: list[httpx.Response] = []
    threads = [post(url, towers(8)[k::2][:2], A, held) for k in range(2)]
    until(lambda: gauge(url, "reward_caller_items_in_flight", "token:team-a") == 4,
          "A holds two requests of two towers")

    over_items = math_a([PLAIN] * 3)  # 4 + 3 items > 6
    assert over_items.status_code == 429, over_items.text
    assert "max_items_per_caller=6" in over_items.json()["detail"]
    assert int(over_items.headers["retry-after"]) >= 1

    # a third request (5 items: room for it) that waits for the worker too (a plain integer
    # would be answered in the server process at once)
    threads.append(post(url, towers(9)[8:], A, held))
    until(lambda: gauge(url, "reward_caller_requests_in_flight", "token:team-a") == 3,
          "A holds three requests")
    over_requests = math_a([PLAIN])
    assert over_requests.status_code == 429, over_requests.text
    assert "max_requests_per_caller=3" in over_requests.json()["detail"]
    assert int(over_requests.headers["retry-after"]) >= 1

    # another caller is served meanwhile, and a request no cap could take is a 413
    other = httpx.post(url + "/v1/verify/math", json={"items": [PLAIN]}, headers=B,
                       timeout=300)
    assert other.status_code == 200 and other.json()["results"][0]["score"] == 1.0
    too_big = httpx.post(url + "/v1/verify/math", json={"items": [PLAIN] * 7}, headers=B,
                         timeout=60)
    assert too_big.status_code == 413 and "max_items_per_caller=6" in too_big.json()["detail"]
    assert gauge(url, "reward_caller_requests_in_flight", "token:team-a") == 3  # still held

    for thread in threads:
        thread.join(timeout=300)
    assert sorted(r.status_code for r in held) == [200, 200, 200]
    assert {r["status"] for h in held for r in h.json()["results"]} == {"timeout"}
    again = math_a([PLAIN] * 3)  # answered: room again
    assert again.status_code == 200 and [r["score"] for r in again.json()["results"]] == [1.0] * 3

    text = httpx.get(url + "/metrics", headers=B, timeout=30).text
    assert re.search(r'^reward_requests_refused_total\{limit="max_items_per_caller"\} 1\.0$',
                     text, re.M)
    assert re.search(r'^reward_requests_refused_total\{limit="max_requests_per_caller"\} 1\.0$',
                     text, re.M)
    waited = re.search(r'^reward_caller_queue_wait_seconds_count\{caller="token:team-a"\} (\S+)$',
                       text, re.M)
    assert waited and float(waited.group(1)) >= 5  # every item of A's that reached the worker
    assert gauge(url, "reward_caller_items_in_flight", "token:team-a") == 0


def test_the_client_waits_out_a_429_and_gets_its_rewards(capped: ServerProcess) -> None:
    """The library client (and the trainer adapters on it) retries a 429 after its
    Retry-After: a caller over its cap gets every reward, late, never an error or a 0."""
    from reward_server.client import RewardClient

    held: list[httpx.Response] = []
    fresh = towers(30)[20:]  # not the other test's: a timeout is remembered, not re-run
    threads = [post(capped.url, fresh[2 * k:2 * k + 2], A, held) for k in range(3)]
    until(lambda: gauge(capped.url, "reward_caller_requests_in_flight", "token:team-a") == 3,
          "A holds three requests")
    with RewardClient(capped.url, token=TEAMS["team-a"], retry_for_s=600,
                      max_attempts=None) as client:
        out = client.verify("math", [PLAIN])
    assert [r["score"] for r in out] == [1.0]
    for thread in threads:
        thread.join(timeout=300)
    text = httpx.get(capped.url + "/metrics", headers=B, timeout=30).text
    refused = re.search(r'^reward_requests_refused_total\{limit="max_requests_per_caller"\} '
                        r'(\S+)$', text, re.M)
    assert refused and float(refused.group(1)) >= 2  # this test's first try was refused too


def start_body(url: str, headers: dict, body: bytes, sent: int) -> socket.socket:
    """A request whose head and first ``sent`` bytes of body are on their way."""
    host, port = url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=60)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    conn.sendall(f"POST /v1/verify/math HTTP/1.1\r\nHost: x\r\n{head}Content-Type: "
                 f"application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                 + body[:sent])
    return conn


def finish_body(conn: socket.socket, body: bytes, sent: int) -> int:
    """The rest of the body; the answer's status."""
    conn.sendall(body[sent:])
    answer = b""
    while b"\r\n" not in answer:
        chunk = conn.recv(4096)
        assert chunk, "closed without an answer"
        answer += chunk
    conn.close()
    return int(answer.split(b" ", 2)[1])


def test_a_body_on_its_way_counts_to_the_callers_caps(capped: ServerProcess) -> None:
    """A request counts from the moment it is taken, not once its body is in: A's three
    requests whose bodies are still arriving fill its cap of 3 (a fourth is a 429 naming
    it), so a caller cannot hold connections, tasks and bodies past its cap by sending
    slowly. Their bytes count too, as they arrive: one body of 40 KB nearly all in leaves no
    room for another under ``max_body_bytes_per_caller`` = 64 KB. B is served meanwhile, and A's requests are
    answered once their bodies are in."""
    url = capped.url
    body = json.dumps({"items": [PLAIN]}).encode()
    slow = [start_body(url, A, body, 5) for _ in range(3)]
    until(lambda: gauge(url, "reward_caller_requests_in_flight", "token:team-a") == 3,
          "A's three requests on their way are counted")
    fourth = httpx.post(url + "/v1/verify/math", json={"items": [PLAIN]}, headers=A,
                        timeout=60)
    assert fourth.status_code == 429 and "max_requests_per_caller=3" in fourth.text
    assert int(fourth.headers["Retry-After"]) >= 1
    assert httpx.post(url + "/v1/verify/math", json={"items": [PLAIN]}, headers=B,
                      timeout=60).status_code == 200
    assert [finish_body(conn, body, 5) for conn in slow] == [200, 200, 200]

    padded = json.dumps({"items": [PLAIN], "pad": "x" * 40_000}).encode()
    sent = len(padded) - 10  # (bytes count as they arrive, not as declared)
    big = start_body(url, A, padded, sent)
    until(lambda: gauge(url, "reward_caller_requests_in_flight", "token:team-a") == 1,
          "A's large request on its way is counted")
    second = httpx.post(url + "/v1/verify/math", content=padded, headers={
        **A, "Content-Type": "application/json"}, timeout=60)
    assert second.status_code == 429 and "max_body_bytes_per_caller=65536" in second.text
    assert finish_body(big, padded, sent) in (200, 422)  # (its verdict is not the point)
    assert httpx.post(url + "/v1/verify/math", content=padded, headers={
        **A, "Content-Type": "application/json"}, timeout=60).status_code in (200, 422)
