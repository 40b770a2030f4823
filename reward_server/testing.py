"""Running a real reward server for tests, benchmarks and scripts: a subprocess on a loopback
port (``run_server``), and the calls that wait for and inspect its sandbox. In the package (as
``starlette.testclient`` is), so bench/ and scripts/ need nothing from tests/."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from sandbox.testing import IMAGE_VARIABLE

# Tests tell callers apart as a deployment behind its proxy does: the server trusts
# 127.0.0.1 as that proxy (PROXY_SETTINGS) and a caller is the X-Forwarded-For address it is
# named by (``as_caller``). Loopback addresses of their own would be one caller: any local
# process can use the whole of 127/8 (reward_server/callers.py).
PROXY_SETTINGS = {"REWARD_SERVER_FORWARDED_ALLOW_IPS": "127.0.0.1"}
A, B, C = "192.0.2.1", "192.0.2.2", "192.0.2.3"  # callers (TEST-NET-1: no real host's)


def as_caller(address: str | None) -> dict[str, str]:
    """The headers that make a request caller ``address``'s to a server started with
    ``PROXY_SETTINGS`` (None: the proxy's own, 127.0.0.1's)."""
    return {} if address is None else {"X-Forwarded-For": address}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, proc: subprocess.Popen, url: str, log: Path,
                 env: dict[str, str] | None = None) -> None:
        self.proc, self.url, self.log = proc, url, log
        self.env = env or {}  # the settings it was started with beyond the defaults

    @property
    def docker_host(self) -> str | None:
        """The engine its sandbox runs on (None: the default one)."""
        return self.env.get("REWARD_SERVER_SANDBOX_DOCKER_HOST")

    @property
    def runtime(self) -> str:
        """The OCI runtime its sandbox containers run under."""
        return self.env.get("REWARD_SERVER_SANDBOX_RUNTIME") or "runc"

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, **kwargs)


@contextmanager
def run_server(tmp_path: Path, env: dict[str, str] | None = None,
               args: list[str] | None = None, startup_s: float = 60,
               port: int | None = None, user: int | None = None) -> Iterator[ServerProcess]:
    """Start ``reward-server`` on a loopback port (a free one unless given), as ``user``
    (a uid, its own group and no other) where given; stop it (and its workers) after."""
    port = port or free_port()
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / f"server-{port}.log"
    inherited = {k: v for k, v in os.environ.items()
                 if not k.startswith("REWARD_SERVER_") or k == IMAGE_VARIABLE}
    full_env = {**inherited, "REWARD_SERVER_MATH_WORKERS": "2",
                "REWARD_SERVER_SANDBOX_POOL_SIZE": "2", **(env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reward_server.cli", "--port", str(port),
             "--log-level", "warning", *(args or [])],
            env=full_env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
            start_new_session=True, user=user, group=user,
            extra_groups=None if user is None else [],
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + startup_s
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited {proc.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield ServerProcess(proc, url, log, env)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def sandbox_containers(owner_pid: int | None = None,
                       docker_host: str | None = None) -> list[dict[str, str]]:
    """Labelled sandbox containers on the engine (optionally of one server process)."""
    import docker

    client = docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
    try:  # one list call (the high-level list inspects each container: racy with removals)
        found = []
        for c in client.api.containers(all=True, filters={"label": "verifiable-rewards.sandbox"}):
            owner = c["Labels"].get("verifiable-rewards.owner", "")
            if owner_pid is None or owner.split(":")[1:2] == [str(owner_pid)]:
                found.append({"id": c["Id"][:12], "owner": owner, "status": c["State"]})
        return found
    finally:
        client.close()


def wait_for_sandbox(url: str, timeout_s: float = 120,
                     headers: dict[str, str] | None = None) -> None:
    """Until a trivial code item runs (the pool fills in the background after start);
    ``headers``: a token's, on a server that needs one."""
    deadline = time.monotonic() + timeout_s
    while True:  # a fresh item each time, never answered from the result cache
        token = str(random.getrandbits(64))
        item = {"response": "print(input())", "tests": [{"input": token, "output": token}]}
        r = httpx.post(f"{url}/v1/verify/code", json={"items": [item]}, timeout=60,
                       headers=headers)
        result = r.json()["results"][0]
        if result["status"] == "ok" and result["score"] == 1.0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"sandbox never became ready: {result}")
        time.sleep(0.5)


@contextmanager
def one_container_server(tmp_path: Path, env: dict[str, str] | None = None
                         ) -> Iterator[ServerProcess]:
    """A server of one sandbox container and no result cache, once the container answers:
    where one caller's item holds the pool while another's waits (callers: ``as_caller``)."""
    base = {"REWARD_SERVER_SANDBOX_POOL_SIZE": "1", "REWARD_SERVER_CACHE_SIZE": "0",
            **PROXY_SETTINGS}
    with run_server(tmp_path, env={**base, **(env or {})}) as srv:
        wait_for_sandbox(srv.url, timeout_s=180)
        yield srv


def verify_code(url: str, *items: dict[str, Any]) -> list[dict[str, Any]]:
    """``POST /v1/verify/code`` with ``items``; the results (a 200 is asserted)."""
    with httpx.Client(base_url=url, timeout=300) as c:
        r = c.post("/v1/verify/code", json={"items": list(items)})
    if r.status_code != 200:
        raise AssertionError(f"POST /v1/verify/code answered {r.status_code}: {r.text[:2000]}")
    return r.json()["results"]
