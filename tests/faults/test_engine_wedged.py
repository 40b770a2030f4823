"""A Docker engine that wedges under a running pool: its containerd stopped (SIGSTOP), as a
hung containerd leaves it, so dockerd answers its ping while /info and every container call
hang (a health check by ping alone passed it as fine). On a second engine of the module's
own (the main one and the shared gVisor engine keep serving the rest of the suite)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from reward_server.testing import run_server, wait_for_sandbox
from reward_server.verifiers.code import SPARE_CONTAINERS
from sandbox import engine_checks, runner
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxUnavailable
from sandbox.runner import Execution, ExecutionResult, Sandbox
from sandbox.testing import ExtraEngine
from tests.helpers.metrics import metric
from tests.helpers.sandboxes import filled, session_in, until
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


async def _filled(engine: ExtraEngine, **changes: float) -> Sandbox:
    """A started sandbox on ``engine`` (``_config`` with ``changes``), its pool full."""
    return await filled(replace(_config(engine), **changes))


def _passed(result: ExecutionResult) -> bool:
    return [t.status for t in result.tests] == ["passed"]


def test_a_wedged_engines_warm_containers_serve_and_no_call_waits_on_it(
        stoppable_engine: ExtraEngine) -> None:
    async def scenario() -> None:
        sandbox = await _filled(stoppable_engine)
        pool = sandbox.pool.pools[0]
        try:
            session = await sandbox.pool.create_own()  # a session's container, kept through
            with _containerd_stopped(stoppable_engine):
                await until(lambda: pool.wedged, 60, "the wedge found")
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
            await until(lambda: not pool.wedged and sandbox.pool.idle == 2, 120,
                         f"the pool back ({sandbox.pool.unavailable_reason})")
            assert sandbox.pool.unavailable_reason is None
            assert _passed(await sandbox.execute(CORRECT))
            # the session's container lives on: the refill's reaper left it alone (with no
            # warm container left it removed every container of this process's but the new)
            pong = await sandbox.pool.request(session, {"mode": "ping"}, 30)
            assert pong.get("status") == "pong", pong
            await pool.destroy(session)
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
        sandbox = await _filled(stoppable_engine)
        pool = sandbox.pool.pools[0]
        with _containerd_stopped(stoppable_engine):
            await until(lambda: pool.wedged, 60, "the wedge found")
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


def test_a_wedged_engine_its_operator_restarts_is_refilled_with_fresh_containers(
        stoppable_engine: ExtraEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fix the unavailable reason names: dockerd restarted while the pool still held
    one of its warm containers. That container died with the old dockerd: it is dropped
    when the engine is found gone, never handed to an item (whose closed channel, on an
    engine that answers again, would score a correct program's run a runtime error)."""
    monkeypatch.setattr(engine_checks, "EVENTS", [])  # not a restart of the suite's own
    monkeypatch.setattr(stoppable_engine, "serve_timeout_s", 5)

    async def scenario() -> None:
        sandbox = await _filled(stoppable_engine)
        pool = sandbox.pool.pools[0]
        try:
            os.kill(stoppable_engine.containerd_pid(), signal.SIGSTOP)
            await until(lambda: pool.wedged, 60, "the wedge found")
            async with sandbox.pool.upkeep():
                assert _passed(await sandbox.execute(LEAVES_A_PROCESS))
            assert sandbox.pool.live == 1
            # the operator's restart: goroutines dumped, dockerd and its containerd stopped
            # (SIGTERM, then SIGKILL), started again
            await asyncio.to_thread(stoppable_engine.ensure_running)
            await until(lambda: pool.state == "serves" and sandbox.pool.idle == 2, 180,
                         f"the pool refilled ({sandbox.pool.unavailable_reason})")
            for _ in range(3):
                assert _passed(await sandbox.execute(CORRECT))
            assert sandbox.pool.live == 2
        finally:
            await sandbox.stop()

    asyncio.run(scenario())


async def _with_dockerd_stopped(engine: ExtraEngine, work: asyncio.Task, after_s: float
                                ) -> object:
    """``work``'s result (or the SandboxUnavailable it raised), dockerd itself stopped
    (SIGSTOP: no stream, no ping) ``after_s`` into it and continued once it ended."""
    assert engine.proc is not None
    await asyncio.sleep(after_s)
    os.kill(engine.proc.pid, signal.SIGSTOP)
    try:
        return await work
    except SandboxUnavailable as exc:
        return exc
    finally:
        os.kill(engine.proc.pid, signal.SIGCONT)


SLOW_CORRECT = Execution("python", "import time\ntime.sleep(2)\nprint(int(input()) + 1)\n",
                         (runner.TestCase("1", "2"),))


def test_a_run_in_flight_when_dockerd_hangs_is_unscorable_not_a_timeout(
        stoppable_engine: ExtraEngine, caplog: pytest.LogCaptureFixture) -> None:
    """dockerd itself stopped (SIGSTOP) under a run: no stream, no ping. The harness never
    answers, through no doing of the program's: unscorable (null), not a ``timeout`` (0).
    The maintainer's checks are kept out of the way (an hour apart), so that the run's own
    end, past its budget, is what finds the engine gone."""
    async def scenario() -> object:
        sandbox = await _filled(stoppable_engine, health_interval_s=3600)
        try:
            run = asyncio.create_task(sandbox.execute(SLOW_CORRECT))
            return await _with_dockerd_stopped(stoppable_engine, run, after_s=1.0)
        finally:
            await sandbox.stop()

    result = asyncio.run(scenario())
    assert isinstance(result, SandboxUnavailable), result  # no container left to run it again
    assert "not reachable" in str(result), result
    assert "while its engine is gone" in caplog.text  # found at the run's end


def test_a_session_cell_under_a_hung_dockerd_is_the_sandboxs_not_the_cells(
        stoppable_engine: ExtraEngine) -> None:
    """A session's cell in flight when dockerd itself stops: the cell's code did nothing to
    earn a timeout; the session is lost to its engine (SandboxUnavailable)."""
    async def scenario() -> object:
        sandbox = Sandbox(replace(_config(stoppable_engine), health_interval_s=3600))
        await sandbox.start()
        try:
            async with session_in(sandbox) as session:
                cell = asyncio.create_task(session.run("import time; time.sleep(1); 1", 2.0))
                return await _with_dockerd_stopped(stoppable_engine, cell, after_s=0.3)
        finally:
            await sandbox.stop()

    result = asyncio.run(scenario())
    assert isinstance(result, SandboxUnavailable), result
    assert "the session's Docker engine is gone" in str(result), result
