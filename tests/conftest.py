"""Shared fixtures: a real reward server on a loopback port, started as a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from reward_server.testing import (  # noqa: F401  (the tests import them from here)
    ServerProcess,
    free_port,
    run_server,
    sandbox_containers,
    verify_code,
    wait_for_sandbox,
)
from reward_server.verifiers.registry import ENTRY_POINT_GROUP
from sandbox import engine_checks
from sandbox.engine_checks import SERVE_TIMEOUT_S, Revival
from sandbox.testing import IMAGE, ExtraEngine

ROOT = Path(__file__).resolve().parent.parent
# The verifiers this installation registers (its own built-ins, the same entry points a
# plug-in uses), as the server's 404 lists them
BUILT_IN_VERIFIERS = sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))
KNOWN_VERIFIERS = "known verifiers: " + ", ".join(BUILT_IN_VERIFIERS)
T = TypeVar("T")

# --- Test tiers ------------------------------------------------------------------------------
# Markers come from what a test uses, so a new test lands in the right tier without anyone
# remembering to mark it: `pytest -m "not server and not docker and not slow"` is the fast
# tier (pure functions and units: under a minute, no root, no engine).
_DOCKER_FIXTURES = {"docker_ready", "extra_engine", "stoppable_engine", "sandbox_runtime"}
# a module that starts servers imports one of these
_SERVER_NAMES = {"run_server", "ServerProcess", "code_server"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        module = vars(getattr(item, "module", None) or object)
        if "server" in used or _SERVER_NAMES & set(module):
            item.add_marker(pytest.mark.server)
        if used & _DOCKER_FIXTURES:
            item.add_marker(pytest.mark.docker)
        callspec = getattr(item, "callspec", None)
        if "extra_engine" in used or (
                callspec is not None and callspec.params.get("sandbox_runtime") == "runsc"):
            item.add_marker(pytest.mark.gvisor)
    kept, once = [], []
    for item in items:
        (once if _runc_only(item) else kept).append(item)
    if once:
        config.hook.pytest_deselected(items=once)
        items[:] = kept


def _runc_only(item: pytest.Item) -> bool:
    """A ``host_side`` test's gVisor copy: what the server does around the sandbox (caps,
    schedules, protocols, bad input) is the same whichever runtime runs the program, so it
    runs under runc alone; its module's ``isolation`` tests, what a program can reach, run
    under gVisor too, beside every test of the sandbox's own modules."""
    callspec = getattr(item, "callspec", None)
    return (callspec is not None and callspec.params.get("sandbox_runtime") == "runsc"
            and item.get_closest_marker("host_side") is not None
            and item.get_closest_marker("isolation") is None)


@pytest.fixture
def open_tmp_path() -> Iterator[Path]:
    """A directory any user may traverse, for files a scoring worker touches: the workers
    run as a uid of their own (reward_server/worker_isolation.py), and pytest's own tmp root
    is its owner's only."""
    path = Path(tempfile.mkdtemp(prefix="vr-open-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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

    out = subprocess.run(["bash", str(ROOT / "sandbox" / "build_image.sh"), "--tag", IMAGE],
                         capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        message = f"no Docker engine or sandbox image: {out.stderr.strip()[-500:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def sandbox_url(server: ServerProcess, docker_ready: None) -> str:
    """The default server, once its sandbox answers (the code tool's tests)."""
    wait_for_sandbox(server.url)
    return server.url


@contextmanager
def _second_engine(name: str) -> Iterator[ExtraEngine]:
    """A second Docker engine with the sandbox image (sandbox/testing.py's ExtraEngine);
    skipped on a developer's machine that cannot start one, failed in CI."""
    # a short path: unix socket paths are limited to 108 bytes
    engine = ExtraEngine(Path("/tmp") / f"vr-{name}-{os.getpid()}")
    try:
        engine.start()
        engine.load_image()
    except Exception as exc:  # noqa: BLE001 - a docker call's TimeoutExpired too: destroyed
        engine.destroy()
        if os.environ.get("CI") == "true":
            pytest.fail(f"could not start a second Docker engine: {exc}")
        pytest.skip(f"could not start a second Docker engine: {exc}")
    try:
        yield engine
    finally:
        engine.destroy()


@pytest.fixture(scope="session")
def extra_engine(docker_ready: None) -> Iterator[ExtraEngine]:
    """The second engine the gVisor tests share; no test stops it (stoppable_engine)."""
    with _second_engine("engine") as engine:
        yield engine


# --- Shared engines, checked before use ------------------------------------------------------
# One test that leaves an engine every later test shares stopped (or a daemon that dies) made
# each later test wait out its own sandbox timeout, a cascade that outran CI's clock. So the
# engines are checked (their ping and /info, milliseconds) before each module's fixtures and
# each test that uses them, restarted if they do not serve (a wedged engine answers its ping
# only), and a restart that fails fails every later user at once.

_MODULES_USING: dict[str, set[str]] = {"docker": set()}
_MAIN_ENGINE = Revival("the Docker engine")


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_finish(session: pytest.Session) -> None:
    """The modules with a Docker test that will run (after ``-m`` and ``-k`` deselect): the
    fast tier's tests in such a module need no engine, and get no check."""
    for item in session.items:
        if item.get_closest_marker("docker") is not None:
            _MODULES_USING["docker"].add(_module_of(item.nodeid))


def _main_engine_socket() -> Path | None:
    """The main engine's unix socket; None where it is reached otherwise (not pinged)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    return Path(host.removeprefix("unix://")) if host.startswith("unix://") else None


_RESTART_MAIN_ENGINE = ("bash", str(ROOT / "sandbox" / "ensure_docker.sh"))
# where the dockerd ensure_docker.sh starts keeps its pid, and dumps its goroutines (exec root)
_MAIN_PIDFILE = Path("/var/run/docker.pid")
_MAIN_EXEC_ROOT = Path("/var/run/docker")


def ensure_main_engine(sock: Path | None, restart: Sequence[str] = _RESTART_MAIN_ENGINE,
                       revival: Revival = _MAIN_ENGINE, pidfile: Path = _MAIN_PIDFILE,
                       exec_root: Path = _MAIN_EXEC_ROOT, may_stop: bool | None = None,
                       serve_timeout_s: float = SERVE_TIMEOUT_S) -> None:
    """The main engine on ``sock`` serves, or is started again by ``restart``
    (``sandbox.engine_checks``); a wedged one is stopped first only in CI (or with
    VR_TESTS_RESTART_DOCKERD=true): a developer's engine is theirs to restart. A test it cannot
    serve fails."""
    if sock is None:  # reached otherwise than by a unix socket: not checked
        return
    if may_stop is None:
        may_stop = "true" in (os.environ.get("CI"), os.environ.get("VR_TESTS_RESTART_DOCKERD"))
    try:
        engine_checks.ensure_main_engine(sock, list(restart), revival, pidfile, exec_root,
                                         may_stop, serve_timeout_s)
    except RuntimeError as exc:
        pytest.fail(str(exc))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """What the engine checks did: a restart heals the run, and would otherwise go unseen."""
    if engine_checks.EVENTS:
        terminalreporter.section("Docker engines restarted during the run")
        for line in engine_checks.EVENTS:
            terminalreporter.write_line(line)


def _ensure_second_engine(request: pytest.FixtureRequest) -> None:
    engine: ExtraEngine = request.getfixturevalue("extra_engine")
    try:
        engine.ensure_running()
    except RuntimeError as exc:
        pytest.fail(str(exc))


# No test stops the main engine (one that stops an engine stops its own), so between a
# module's checks a test's is made at most this often: what it looks for (a crash, a wedge)
# found a test later costs that test alone, where a check per test cost 1,500 of them 50-100
# ms each
MAIN_RECHECK_S = 15.0
_main_checked_at = [float("-inf")]


@pytest.fixture(scope="module", autouse=True)
def _module_engine_answers(request: pytest.FixtureRequest) -> None:
    """Before a module's own fixtures (its servers wait minutes for a sandbox), the main
    engine answers; the second engine is checked as a runtime's settings are read
    (``SandboxRuntime.env``), which is where a module's server takes it."""
    if _module_of(request.node.nodeid) in _MODULES_USING["docker"]:
        ensure_main_engine(_main_engine_socket())
        _main_checked_at[0] = time.monotonic()


@pytest.fixture(autouse=True)
def _engines_answer(request: pytest.FixtureRequest) -> None:
    """Before a test on a shared engine: it answers (a test before may have stopped the
    second one; the main one is checked every ``MAIN_RECHECK_S``)."""
    if (request.node.get_closest_marker("docker") is not None
            and time.monotonic() - _main_checked_at[0] >= MAIN_RECHECK_S):
        ensure_main_engine(_main_engine_socket())
        _main_checked_at[0] = time.monotonic()
    if request.node.get_closest_marker("gvisor") is not None:
        _ensure_second_engine(request)


@pytest.fixture(scope="session")
def _stop_engine(docker_ready: None) -> Iterator[ExtraEngine]:
    """One engine for every module that stops one: its image (2 GB) is loaded once, where
    a load took most of a minute for each module."""
    with _second_engine("stop") as engine:
        yield engine


@pytest.fixture(scope="module")
def _module_engine(_stop_engine: ExtraEngine) -> ExtraEngine:
    """The stop engine, with restarts of the module's own to spend (``Revival``)."""
    _stop_engine.fresh_restarts()
    return _stop_engine


@pytest.fixture
def stoppable_engine(_module_engine: ExtraEngine) -> ExtraEngine:
    """A second engine for tests that stop and restart it, never the one the gVisor tests
    run on: each test gets it answering (restarted if the one before left it stopped), and
    one that fails to come back fails the rest of its module at once."""
    try:
        _module_engine.ensure_running()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    return _module_engine


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
            # None: none left (a container being removed)
            return [" ".join(p[7:]) for p in top.get("Processes") or []]
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
    # raises where the engine does not answer and cannot be brought back
    ensure_running: Callable[[], None] | None = None

    @property
    def env(self) -> dict[str, str]:
        """Server settings that put its sandbox there, once its engine answers."""
        if self.ensure_running is not None:
            self.ensure_running()
        if self.docker_host is None:
            return {}
        return {"REWARD_SERVER_SANDBOX_DOCKER_HOST": self.docker_host,
                "REWARD_SERVER_SANDBOX_RUNTIME": self.name}


@pytest.fixture(scope="session", params=["runc", "runsc"])
def sandbox_runtime(request: pytest.FixtureRequest) -> SandboxRuntime:
    """The code-verifier, hostile and seccomp tests run once per runtime: runc (the default)
    and gVisor, registered on the second engine (sandbox/testing.py's ExtraEngine)."""
    if request.param == "runc":
        request.getfixturevalue("docker_ready")
        return SandboxRuntime("runc")
    engine = request.getfixturevalue("extra_engine")
    if engine.runsc is None:
        message = "gVisor's runsc is not installed; run: bash sandbox/ensure_runsc.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SandboxRuntime("runsc", engine.host, engine.ensure_running)
