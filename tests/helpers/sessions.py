"""What the tests of the session machinery (``/v1/sessions``, ``/run_jupyter``) look for
from outside: the containers that run a session's interpreter, and a wait for a state the
server reaches in the background (a container removed)."""

from __future__ import annotations

import time
from collections.abc import Callable

from reward_server.testing import sandbox_containers
from tests.conftest import ServerProcess, container_commands


def session_containers(srv: ServerProcess) -> list[str]:
    """The server's containers that run a session's interpreter (harness/kernel.py)."""
    import docker

    client = docker.DockerClient(base_url=srv.docker_host) if srv.docker_host else \
        docker.from_env()
    found = []
    try:
        for c in sandbox_containers(srv.proc.pid, srv.docker_host):
            try:
                commands = container_commands(client.containers.get(c["id"]), srv.runtime)
            except (docker.errors.NotFound, RuntimeError):
                continue  # removed, or being removed, meanwhile
            if any("kernel.py" in command for command in commands):
                found.append(c["id"])
        return found
    finally:
        client.close()


def eventually(check: Callable[[], bool], timeout_s: float = 90, what: str = "") -> None:
    """Wait until ``check()`` holds (a bound against a hang, not a measurement)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.25)
