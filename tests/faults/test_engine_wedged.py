"""A Docker engine that wedges under a running pool: its containerd stopped (SIGSTOP), as a
hung containerd leaves it, so dockerd answers its ping while /info and every container call
hang (a health check by ping alone passed it as fine). On a second engine of the module's
own (the main one and the shared gVisor engine keep serving the rest of the suite)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from reward_server.testing import run_server, wait_for_sandbox
from reward_server.verifiers.code import SPARE_CONTAINERS
from sandbox import runner
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxUnavailable
from sandbox.runner import Execution, ExecutionResult, Sandbox
from sandbox.testing import ExtraEngine
from tests.helpers.metrics import metric
from tests.helpers.waiting import eventually

CORRECT = Execution("python", "print(int(input()) + 1)\n", (runner.TestCase("1", "2"),))
# a process left behind spoils its container: replaced, in the turn of the caller whose it was
LEAVES_A_PROCESS = Execution(
    "python", "import os, time\nif os.fork() == 0:\n    time.sleep(300)\nprint(int(input()) + 1)\n",
    (runner.TestCase("1", "2"),))
# What a call the pool made on the wedged engine waited: its client's whole 30 s timeout. The
# bounds below tell that wait from none; they are not speed goals.
CLIENT_TIMEOUT_S = 30.0


def _config(engine: ExtraEngine) -> SandboxConfig:
    return SandboxConfig(docker_hosts=(engine.host,), pool_size=2, health_interval_s=0.5,
                         health_timeout_s=2.0)


@contextmanager
def _containerd_stopped(engine: ExtraEngine) -> Iterator[None]:
    pid = engine.containerd_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.2)


def _passed(result: ExecutionResult) -> bool:
    return [t.status for t in result.tests] == ["passed"]


def test_a_wedged_engines_warm_containers_serve_and_no_call_waits_on_it(
        stoppable_engine: ExtraEngine) -> None:
    async def scenario() -> None:
        sandbox = Sandbox(_config(stoppable_engine))
        pool = sandbox.pool.pools[0]
        await sandbox.start()
        try:
            await _until(lambda: sandbox.pool.idle == 2, 120, "the pool filled")
            with _containerd_stopped(stoppable_engine):
                await _until(lambda: pool.wedged, 60, "the wedge found")
                reason = sandbox.pool.unavailable_reason or ""
                assert "answers its ping but not /info within 2 s (wedged" in reason, reason
                # its warm containers still carry executions (dockerd copies their streams)
                assert _passed(await sandbox.execute(CORRECT))
                # one a program spoils is dropped, neither removed nor replaced there: the
                # caller's turn (upkeep) does not wait on the engine
                started = time.monotonic()
                async with sandbox.pool.upkeep():
                    assert _passed(await sandbox.execute(LEAVES_A_PROCESS))
                assert time.monotonic() - started < CLIENT_TIMEOUT_S
                assert (sandbox.pool.live, sandbox.pool.idle) == (1, 1)
                # a session's own container is refused at once, saying why
                started = time.monotonic()
                with pytest.raises(SandboxUnavailable, match="wedged"):
                    await sandbox.pool.create_own()
                assert time.monotonic() - started < CLIENT_TIMEOUT_S
                # the last warm container serves; spent, the next caller is told why at once
                async with sandbox.pool.upkeep():
                    assert _passed(await sandbox.execute(LEAVES_A_PROCESS))
                assert sandbox.pool.live == 0
                with pytest.raises(SandboxUnavailable, match="wedged"):
                    await sandbox.execute(CORRECT)
            # containerd goes on: the pool serves again, refilled
            await _until(lambda: not pool.wedged and sandbox.pool.idle == 2, 120,
                         f"the pool back ({sandbox.pool.unavailable_reason})")
            assert sandbox.pool.unavailable_reason is None
            assert _passed(await sandbox.execute(CORRECT))
        finally:
            await sandbox.stop()

    asyncio.run(scenario())
    # the two dropped while it was wedged were removed by the engine once it served again
    # (their closed stdin ended the harness: AutoRemove), the new ones at stop
    eventually(lambda: stoppable_engine.sandbox_containers() == [], 120,
               "every sandbox container removed")


def test_a_server_stops_beside_a_wedged_engine_without_waiting_on_it(
        stoppable_engine: ExtraEngine) -> None:
    async def scenario() -> float:
        sandbox = Sandbox(_config(stoppable_engine))
        pool = sandbox.pool.pools[0]
        await sandbox.start()
        await _until(lambda: sandbox.pool.idle == 2, 120, "the pool filled")
        with _containerd_stopped(stoppable_engine):
            await _until(lambda: pool.wedged, 60, "the wedge found")
            started = time.monotonic()
            await sandbox.stop()
            return time.monotonic() - started

    assert asyncio.run(scenario()) < CLIENT_TIMEOUT_S
    # left to the engine: each harness ended on its closed stdin, removed once it serves
    eventually(lambda: stoppable_engine.sandbox_containers() == [], 120,
               "every sandbox container removed")


LEAVES_A_PROCESS_ITEM = {
    "verifier": "code", "response": "```python\n" + LEAVES_A_PROCESS.source + "```",
    "tests": [{"input": "1", "output": "2"}]}


def test_beside_a_wedged_engine_every_item_is_scored_and_none_waits_on_it(
        stoppable_engine: ExtraEngine, tmp_path: Path) -> None:
    """A server on two engines, one of them wedged: eight callers at once, each with items
    that spoil every container they run in, are all scored, on the wedged engine's warm
    containers and then on the other's; nothing is asked of the wedged engine (a removal or
    a start there would wait out the client, in a caller's turn); the server's metrics say
    which engine state it found; and it is refilled once it serves again."""
    main = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    env = {"REWARD_SERVER_SANDBOX_DOCKER_HOSTS": f"{main},{stoppable_engine.host}",
           "REWARD_SERVER_SANDBOX_HEALTH_TIMEOUT_S": "2",
           "REWARD_SERVER_CACHE_SIZE": "0"}  # each item run, not answered from the cache
    per_engine = 2 + SPARE_CONTAINERS  # run_server's pool size of 2, and the warm spare
    with run_server(tmp_path, env=env) as srv:
        wait_for_sandbox(srv.url)
        eventually(lambda: len(stoppable_engine.sandbox_containers(running=True))
                   == per_engine, 180, "the second engine's pool filled")
        assert engines(srv.url) == (2, 0, 0)
        with _containerd_stopped(stoppable_engine):
            eventually(lambda: engines(srv.url) == (1, 1, 0), 60, "the wedge found")

            async def callers() -> list[dict]:
                async with httpx.AsyncClient(timeout=300) as client:
                    replies = await asyncio.gather(*(
                        client.post(f"{srv.url}/v1/rewards",
                                    json={"items": [LEAVES_A_PROCESS_ITEM] * 4})
                        for _ in range(8)))
                return [r.json() for r in replies]

            replies = asyncio.run(callers())
            assert all(r["rewards"] == [1.0] * 4 for r in replies), replies
            log = srv.log.read_text()
            assert "no replacement for container" not in log, log[-3000:]
            assert "could not remove sandbox container" not in log, log[-3000:]
        # (its spent containers, whose harnesses ended while it was wedged, may still be
        # listed as running until the engine has caught up: the state first)
        eventually(lambda: engines(srv.url) == (2, 0, 0), 120, "the engine found serving")
        eventually(lambda: len(stoppable_engine.sandbox_containers(running=True))
                   == per_engine, 180, "the second engine refilled")
    eventually(lambda: stoppable_engine.sandbox_containers() == [], 120,
               "every sandbox container removed")


def engines(url: str) -> tuple[float, float, float]:
    """The server's count of engines found serving, wedged and gone."""
    return tuple(metric(url, f'reward_sandbox_engines{{state="{state}"}}')
                 for state in ("serves", "wedged", "gone"))  # type: ignore[return-value]
