"""A pool fit for the next item: after hostile code, the server is healthy and every sandbox
container is back, running its harness (and the harness's fork server) only."""

from __future__ import annotations

import time

import docker
import httpx

from reward_server.verifiers.code import SPARE_CONTAINERS
from tests.conftest import ServerProcess, container_commands, sandbox_containers, wait_for_sandbox

POOL = 2  # warm containers of the servers whose pool assert_clean checks


def assert_clean(srv: ServerProcess) -> None:
    """Healthy server; the pool back at full size; every container running its harness and
    the harness's fork server only."""
    # answered within its 5 s timeout: the event loop is not held (a bound against a hang;
    # the hostile programs' CPU is the container's, never the server's)
    assert httpx.get(srv.url + "/healthz", timeout=5).status_code == 200
    wait_for_sandbox(srv.url)
    client = (docker.DockerClient(base_url=srv.docker_host) if srv.docker_host
              else docker.from_env())
    # a leak stays; removing a gVisor container a fork bomb filled can take over a minute on
    # a loaded 2-core machine (once 4 of 2 + 1 were still running at 60 s in a full-suite run)
    deadline = time.monotonic() + 180
    try:
        while True:  # replaced containers are removed in the background: wait for the pool
            problem = _pool_problem(srv, client)
            if problem is None:
                return
            assert time.monotonic() < deadline, problem
            time.sleep(0.2)
    finally:
        client.close()


def _pool_problem(srv: ServerProcess, client: docker.DockerClient) -> str | None:
    mine = sandbox_containers(srv.proc.pid, srv.docker_host)
    if len(mine) != POOL + SPARE_CONTAINERS or any(c["status"] != "running" for c in mine):
        return f"pool not back to {POOL} + {SPARE_CONTAINERS} running containers: {mine}"
    for c in mine:
        try:
            commands = container_commands(client.containers.get(c["id"]), srv.runtime)
        except docker.errors.NotFound:
            return f"container {c['id']} went away"
        except RuntimeError as exc:  # its listing failed or did not return (bounded)
            return str(exc)
        harness = [cmd for cmd in commands if cmd.endswith("/opt/harness/__main__.py")]
        fork_server = [cmd for cmd in commands if "zygote_main" in cmd]
        if len(harness) != 1 or len(fork_server) > 1 or len(commands) > 2:
            return f"container {c['id']} runs more than its harness and fork server: {commands}"
    return None
