"""Several uvicorn worker processes: callers spread over them (each address to one: its caps
hold whole), metrics add up across them, and every worker's pools stop with the server."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import run_server


def test_two_workers_share_the_load_and_the_metrics(tmp_path: Path) -> None:
    workers, other = other_worker_address()
    env = {"REWARD_SERVER_MATH_WORKERS": "1", "REWARD_SERVER_SANDBOX_POOL_SIZE": "1"}
    with run_server(tmp_path, env=env, args=["--workers", str(workers)], startup_s=120) as srv:
        pids = set()
        items = [{"verifier": "math", "response": f"\\boxed{{{i}}}", "answer": str(i)}
                 for i in range(5)]
        for k in range(40):  # from two addresses steered to two workers
            transport = httpx.HTTPTransport(local_address=("127.0.0.1", other)[k % 2])
            with httpx.Client(transport=transport, timeout=60) as client:
                pids.add(client.get(f"{srv.url}/healthz").json()["instance"])
                r = client.post(f"{srv.url}/v1/rewards", json={"items": items})
            assert r.json()["rewards"] == [1.0] * 5
        assert len(pids) == 2, pids
        metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
        counted = sum(float(line.split()[1]) for line in metrics.splitlines()
                      if line.startswith('reward_requests_total{') and '"/v1/rewards"' in line)
        assert counted == 40  # both workers' counts, whichever worker answered /metrics


def test_workers_get_the_token_and_its_file_is_gone_after(tmp_path: Path) -> None:
    """The workers read one settings file the CLI wrote (not the environment); it holds the
    token in clear, so it goes when the server does."""
    files = lambda: set(Path(tempfile.gettempdir()).glob("reward-server-settings-*.json"))  # noqa: E731
    before = files()
    env = {"REWARD_SERVER_MATH_WORKERS": "1", "REWARD_SERVER_SANDBOX_POOL_SIZE": "1"}
    with run_server(tmp_path, env=env, args=["--workers", "2", "--api-token", "s3cret"],
                    startup_s=120) as srv:
        assert len(files() - before) == 1
        item = {"items": [{"verifier": "math", "response": "\\boxed{2}", "answer": "2"}]}
        for _ in range(20):
            assert httpx.post(f"{srv.url}/v1/rewards", json=item, timeout=60).status_code == 401
            r = httpx.post(f"{srv.url}/v1/rewards", json=item, timeout=60,
                           headers={"Authorization": "Bearer s3cret"})
            assert r.status_code == 200 and r.json()["rewards"] == [1.0]
    assert files() - before == set()


def _instance(url: str, source: str) -> str:
    """Which worker answers a new connection from ``source``."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source)) as client:
        return client.get(f"{url}/healthz", timeout=30).json()["instance"]


def seen_as_itself(address: str) -> bool:
    """Whether a connection from ``address`` to loopback arrives from it (Docker's
    masquerade rewrites its bridge's)."""
    with socket.create_server(("127.0.0.1", 0)) as server, socket.socket() as client:
        client.bind((address, 0))
        client.connect(server.getsockname())
        conn, (peer, _) = server.accept()
        conn.close()
        return peer == address


def other_worker_address() -> tuple[int, str]:
    """(workers, a local IPv4 address steered to another worker than loopback's first):
    the kernel steers an IPv4 address to the worker of its value modulo the count."""
    local = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
             if a.family == socket.AF_INET and not a.address.startswith("127.")]
    usable = [address for address in local if seen_as_itself(address)]
    for workers in (2, 3, 5):
        for address in usable:
            if int(ipaddress.IPv4Address(address)) % workers:
                return workers, address
    pytest.fail(f"no local address to reach a second worker from: {local}")


def test_each_address_reaches_one_worker_and_its_replacement(tmp_path: Path) -> None:
    """Every connection from one address reaches one worker: all of loopback the first, an
    address of this machine's another; a worker killed is replaced on its socket."""
    workers, other = other_worker_address()
    env = {"REWARD_SERVER_MATH_WORKERS": "1", "REWARD_SERVER_SANDBOX_POOL_SIZE": "1"}
    with run_server(tmp_path, env=env, args=["--workers", str(workers)], startup_s=120) as srv:
        seen = {source: {_instance(srv.url, source) for _ in range(12)}
                for source in ("127.0.0.1", "127.0.0.2", other)}
        assert all(len(pids) == 1 for pids in seen.values()), seen
        first, loopback_too, second = (pids.pop() for pids in seen.values())
        assert first == loopback_too != second
        os.kill(int(second.rsplit(":", 1)[1]), signal.SIGKILL)
        deadline = time.monotonic() + 120  # uvicorn's supervisor starts a replacement
        while True:
            try:
                replacement = _instance(srv.url, other)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "no worker took the socket again"
                time.sleep(0.5)
        assert replacement not in (first, second)
        assert _instance(srv.url, "127.0.0.1") == first


def test_a_callers_cap_holds_across_workers(tmp_path: Path) -> None:
    """Eight requests at once from loopback (one caller, from two of its addresses), each
    holding a math worker to the time limit, against a cap of four requests per caller:
    four are taken and four answered 429, as from one process (steered by address, each of
    the two processes would have taken four)."""
    env = {"REWARD_SERVER_MATH_WORKERS": "1", "REWARD_SERVER_SANDBOX_POOL_SIZE": "1",
           "REWARD_SERVER_MAX_REQUESTS_PER_CALLER": "4", "REWARD_SERVER_MATH_TIMEOUT_S": "3",
           "REWARD_SERVER_CACHE_SIZE": "0"}
    with run_server(tmp_path, env=env, args=["--workers", "2"], startup_s=120) as srv:
        def post(k: int) -> int:
            tower = f"\\boxed{{{3 + k}^{{{5 + k}^{{{7 + k}^{{9}}}}}}}}"
            transport = httpx.HTTPTransport(local_address=f"127.0.0.{1 + k % 2}")
            with httpx.Client(transport=transport, timeout=120) as client:
                return client.post(f"{srv.url}/v1/verify/math", json={
                    "items": [{"response": tower, "answer": "3"}]}).status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = sorted(pool.map(post, range(8)))
    assert statuses == [200] * 4 + [429] * 4, statuses
