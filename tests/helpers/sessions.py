"""What the tests of the session machinery (``/v1/sessions``, ``/run_jupyter``) look for
from outside: the containers that run a session's interpreter."""

from __future__ import annotations

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

