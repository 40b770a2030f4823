"""Shared fixtures: a real reward server on a loopback port, started as a subprocess."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


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
               port: int | None = None) -> Iterator[ServerProcess]:
    """Start ``reward-server`` on a loopback port (a free one unless given); stop it (and its
    workers) after."""
    port = port or free_port()
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / f"server-{port}.log"
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("REWARD_SERVER_")}
    full_env = {**inherited, "REWARD_SERVER_MATH_WORKERS": "2",
                "REWARD_SERVER_SANDBOX_POOL_SIZE": "2", **(env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reward_server.cli", "--port", str(port),
             "--log-level", "warning", *(args or [])],
            env=full_env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
            start_new_session=True,
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


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The default server, shared by every test that does not change settings."""
    with run_server(tmp_path_factory.mktemp("server")) as srv:
        yield srv


@pytest.fixture(scope="session")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


# --- Docker ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """The engine runs and the sandbox image is built (building it if needed). Without an
    engine the sandbox tests skip on a developer's machine and fail in CI."""
    import subprocess

    out = subprocess.run(["bash", str(ROOT / "sandbox" / "build_image.sh")],
                         capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        message = f"no Docker engine or sandbox image: {out.stderr.strip()[-500:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


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


def wait_for_sandbox(url: str, timeout_s: float = 120) -> None:
    """Until a trivial code item runs (the pool fills in the background after start)."""
    deadline = time.monotonic() + timeout_s
    while True:  # a fresh item each time, never answered from the result cache
        token = str(random.getrandbits(64))
        item = {"response": "print(input())", "tests": [{"input": token, "output": token}]}
        r = httpx.post(f"{url}/v1/verify/code", json={"items": [item]}, timeout=60)
        result = r.json()["results"][0]
        if result["status"] == "ok" and result["score"] == 1.0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"sandbox never became ready: {result}")
        time.sleep(0.5)


def verify_code(url: str, *items: dict[str, Any]) -> list[dict[str, Any]]:
    """``POST /v1/verify/code`` with ``items``; the results (a 200 is asserted)."""
    with httpx.Client(base_url=url, timeout=300) as c:
        r = c.post("/v1/verify/code", json={"items": list(items)})
    assert r.status_code == 200, r.text
    return r.json()["results"]


@pytest.fixture(scope="session")
def extra_engine(docker_ready: None, tmp_path_factory: pytest.TempPathFactory):
    """A second Docker engine with the sandbox image (see tests/extra_engine.py)."""
    from tests.extra_engine import ExtraEngine

    # a short path: unix socket paths are limited to 108 bytes
    engine = ExtraEngine(Path("/tmp") / f"vr-engine-{os.getpid()}")
    try:
        engine.start()
        engine.load_image()
    except (RuntimeError, OSError) as exc:
        engine.destroy()
        if os.environ.get("CI") == "true":
            pytest.fail(f"could not start a second Docker engine: {exc}")
        pytest.skip(f"could not start a second Docker engine: {exc}")
    yield engine
    engine.destroy()


# Under gVisor a container's PIDs are its own (``docker top`` maps them onto the host's), so a
# process inside lists them, leaving itself out.
_LIST_PROCESSES = ("import os\nfor p in os.listdir('/proc'):\n"
                   "    if p.isdigit() and int(p) != os.getpid():\n"
                   "        print(open(f'/proc/{p}/cmdline').read().replace(chr(0), ' ').strip())")


EXEC_TIMEOUT_S = 30.0


def bounded(fn: Callable[[], T], timeout_s: float) -> T:
    """``fn()``, or TimeoutError after ``timeout_s``: a Docker call that never returns (a
    ``docker exec`` into a dying container once hung a whole CI run) cannot stall the suite.
    It runs on a daemon thread, which a hung call leaves behind without blocking the exit."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"no answer from the Docker engine within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def container_commands(container, runtime: str) -> list[str]:
    """The command lines of the processes in a sandbox container (a docker SDK Container);
    RuntimeError when the engine does not list them within EXEC_TIMEOUT_S, or the container
    stopped meanwhile (the pool replacing it)."""
    import docker

    try:
        if runtime == "runc":
            top = bounded(container.top, EXEC_TIMEOUT_S)
            return [" ".join(p[7:]) for p in top["Processes"]]
        out = bounded(lambda: container.exec_run(["python3", "-c", _LIST_PROCESSES]),
                      EXEC_TIMEOUT_S)
    except (TimeoutError, docker.errors.APIError) as exc:  # hung; or being replaced, gone
        raise RuntimeError(f"container {container.short_id}: {exc}") from None
    if out.exit_code != 0:
        raise RuntimeError(f"container {container.short_id}: listing its processes exited "
                           f"{out.exit_code}: {out.output[-300:]!r}")
    return out.output.decode().splitlines()


@dataclass(frozen=True)
class SandboxRuntime:
    """Where a sandbox test runs: runc on the main engine, or gVisor (runsc) on the second."""

    name: str
    docker_host: str | None = None  # None: the main engine

    @property
    def env(self) -> dict[str, str]:
        """Server settings that put its sandbox there."""
        if self.docker_host is None:
            return {}
        return {"REWARD_SERVER_SANDBOX_DOCKER_HOST": self.docker_host,
                "REWARD_SERVER_SANDBOX_RUNTIME": self.name}


@pytest.fixture(scope="session", params=["runc", "runsc"])
def sandbox_runtime(request: pytest.FixtureRequest) -> SandboxRuntime:
    """The code-verifier, hostile and seccomp tests run once per runtime: runc (the default)
    and gVisor, registered on the second engine (tests/extra_engine.py)."""
    if request.param == "runc":
        request.getfixturevalue("docker_ready")
        return SandboxRuntime("runc")
    engine = request.getfixturevalue("extra_engine")
    if engine.runsc is None:
        message = "gVisor's runsc is not installed; run: bash sandbox/ensure_runsc.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SandboxRuntime("runsc", engine.host)
