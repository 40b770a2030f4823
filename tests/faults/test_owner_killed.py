"""A server killed hard on another host leaves no container behind, and no live pool loses one.

Two servers share an engine reached over mutual TLS, as two reward-server pods share a
sandbox engine on Kubernetes; each runs in a UTS namespace of its own with a pod's hostname,
so no reaper (theirs, or any other server's on this machine) can judge the other's owner
label. One is SIGKILLed in the middle of a batch: its containers end themselves (the engine
closes a container's stdin when the attach stream ends, the harness exits, the engine removes
the container) within the bound, its busy ones once their program is done. The other's
pool, idle all the while with its reaper running every second, keeps every container and
still scores."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reward_server.testing import (
    free_port,
    sandbox_containers,
    verify_code,
    wait_for_sandbox,
)
from reward_server.verifiers.code import SPARE_CONTAINERS
from tests.deploy.tls_engine import make_certs, tls_engine

pytestmark = pytest.mark.usefixtures("docker_ready")
POOL_SIZE = 2
SLEEP_S = 3  # what the killed server's busy containers still have to run
BOUND_S = 30  # measured: gone within 2 s of the kill, the busy ones within SLEEP_S more
IDLE_S = 20  # the live pool's idle watch: 4 engine pings, 20 reaps
STARTUP_S = 180  # a loaded machine's imports (math-verify) before /healthz answers


@contextlib.contextmanager
def server_on_host(tmp_path: Path, hostname: str, env: dict[str, str]
                   ) -> Iterator[tuple[subprocess.Popen, str]]:
    """``reward-server`` in a UTS namespace of hostname ``hostname``: its process and URL."""
    port = free_port()
    tmp_path.mkdir(parents=True, exist_ok=True)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("REWARD_SERVER_")}
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(
            ["unshare", "--uts", "sh", "-c",
             'hostname "$1" && exec "$0" -m reward_server.cli --port "$2" --log-level warning',
             sys.executable, hostname, str(port)],
            env={**inherited, "REWARD_SERVER_MATH_WORKERS": "1", **env}, cwd=tmp_path,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-3000:]
            time.sleep(0.2)
        yield proc, url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _of(hostname: str) -> set[str]:
    return {c["id"] for c in sandbox_containers() if c["owner"].startswith(f"{hostname}:")}


@pytest.fixture
def hostnames() -> Iterator[tuple[str, str]]:
    """The two servers' hostnames; whatever a failed run left of theirs is removed after."""
    names = ("reward-server-a", "reward-server-b")
    yield names
    left = set().union(*(_of(name) for name in names))
    if left:
        subprocess.run(["docker", "rm", "-f", *left], capture_output=True, timeout=120)


def test_a_hard_killed_servers_containers_end_and_a_live_pool_keeps_its_own(
        tmp_path: Path, hostnames: tuple[str, str]) -> None:
    killed_host, live_host = hostnames
    certs = make_certs(tmp_path / "certs")
    with tls_engine(certs, verify_clients=True) as engine:
        env = {"REWARD_SERVER_SANDBOX_DOCKER_HOSTS": engine.address,
               "REWARD_SERVER_SANDBOX_TLS_CERT_PATH": str(certs / "client"),
               "REWARD_SERVER_SANDBOX_POOL_SIZE": str(POOL_SIZE),
               "REWARD_SERVER_SANDBOX_REAP_INTERVAL_S": "1"}
        with server_on_host(tmp_path / "a", killed_host, env) as (killed, killed_url), \
                server_on_host(tmp_path / "b", live_host, env) as (_, live_url):
            wait_for_sandbox(killed_url)
            wait_for_sandbox(live_url)
            doomed, kept = _of(killed_host), _of(live_host)
            assert len(doomed) == len(kept) == POOL_SIZE + SPARE_CONTAINERS, (doomed, kept)

            sleeper = {"response": f"import time\ntime.sleep({SLEEP_S})",
                       "tests": [{"output": ""}]}

            def send_batch() -> None:
                with contextlib.suppress(httpx.HTTPError):  # the server dies under it
                    httpx.post(f"{killed_url}/v1/verify/code",
                               json={"items": [sleeper] * POOL_SIZE}, timeout=60)

            batch = threading.Thread(target=send_batch)
            batch.start()
            time.sleep(1)  # the batch is in the containers
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait()
            batch.join()
            killed_at = time.monotonic()
            while _of(killed_host):
                assert time.monotonic() - killed_at < BOUND_S, sandbox_containers()
                time.sleep(0.2)
            gone_after = time.monotonic() - killed_at

            time.sleep(max(0.0, IDLE_S - gone_after))
            assert _of(live_host) == kept  # idle, reaped by no one
            item = {"response": "print(input())", "tests": [{"input": "7", "output": "7"}]}
            (result,) = verify_code(live_url, item)
            assert (result["status"], result["score"]) == ("ok", 1.0), result
            assert _of(live_host) == kept
            assert not engine.refusals, engine.refusals  # every connection carried the cert
    print(f"the killed server's containers were gone {gone_after:.1f} s after SIGKILL")
