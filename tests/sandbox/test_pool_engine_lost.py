"""An execution in flight when the pool drops its containers (``ContainerPool.engine_lost``)
is the pool's loss, not the program's; and one failed health ping no longer drops them.

Before: one failed ping dropped the pool, and the run in flight, its channel closed under a
blocked read, waited out its whole budget (20.5 s here) and was scored ``timeout``: 0 for a
correct program, on an engine that was fine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sandbox import runner
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxUnavailable
from sandbox.runner import Execution, Sandbox
from tests.helpers.sandboxes import session_in

pytestmark = pytest.mark.usefixtures("docker_ready")

CORRECT = Execution("python", "print(int(input()) + 1)\n", (runner.TestCase("1", "2"),))
SLOW_CORRECT = Execution("python", "import time\ntime.sleep(2)\nprint(int(input()) + 1)\n",
                         (runner.TestCase("1", "2"),))
# What a run whose channel was closed under it waited before (its whole budget): the bounds
# below tell that wait from an answer at once, and are not speed goals (the verdicts are
# the behaviour; a loaded machine slows the 2 s program, not past this)
WAITED_OUT_S = 20.0


async def _during_a_run(config: SandboxConfig,
                        meanwhile: Callable[[Sandbox], Awaitable[None]]) -> tuple[Any, float]:
    """``SLOW_CORRECT``'s result (or the SandboxUnavailable it raised) and how long it took,
    with ``meanwhile`` done a second into the run."""
    sandbox = Sandbox(config)
    await sandbox.start()
    try:
        deadline = time.monotonic() + 120
        while sandbox.pool.idle == 0:
            assert time.monotonic() < deadline, sandbox.pool.unavailable_reason
            await asyncio.sleep(0.2)
        started = time.monotonic()
        run = asyncio.create_task(sandbox.execute(SLOW_CORRECT))
        await asyncio.sleep(1.0)
        await meanwhile(sandbox)
        try:
            result: Any = await run
        except SandboxUnavailable as exc:
            result = exc
        return result, time.monotonic() - started
    finally:
        await sandbox.stop()


def test_a_run_in_a_container_the_pool_dropped_is_unscorable_at_once() -> None:
    async def drop(sandbox: Sandbox) -> None:
        sandbox.pool.pools[0].engine_lost()  # what the maintainer does for an engine gone

    result, elapsed = asyncio.run(_during_a_run(SandboxConfig(pool_size=1), drop))
    assert isinstance(result, SandboxUnavailable), result  # null: the program did not cause it
    assert elapsed < WAITED_OUT_S, elapsed  # at once, not after the budget


def test_one_failed_health_ping_leaves_the_pool_and_the_run_alone() -> None:
    missed: list[bool] = []

    async def fail_one_ping(sandbox: Sandbox) -> None:
        health = sandbox.pool.pools[0]._health
        real_answers = health.answers

        def answers(path: str) -> bool:
            if path == "/_ping" and not missed:  # once: it missed a ping while busy
                missed.append(True)
                return False
            return real_answers(path)

        health.answers = answers  # type: ignore[method-assign]

    config = SandboxConfig(pool_size=1, health_interval_s=0.2)
    result, elapsed = asyncio.run(_during_a_run(config, fail_one_ping))
    assert not isinstance(result, SandboxUnavailable), result
    assert [t.status for t in result.tests] == ["passed"], result
    assert elapsed < WAITED_OUT_S, elapsed
    assert missed, "no health check missed its ping during the run"


def test_a_container_that_died_idle_costs_the_next_item_nothing() -> None:
    """A warm container whose harness died while it sat idle (killed from outside; an
    engine's restart quicker than its health checks kills every one), its engine answering
    throughout: the next item finds its stream gone before its job was sent, and runs in
    another container, rather than being scored a runtime error for a death it did not
    cause."""
    async def scenario() -> Any:
        sandbox = Sandbox(SandboxConfig(pool_size=2))
        await sandbox.start()
        try:
            deadline = time.monotonic() + 120
            while sandbox.pool.idle < 2:
                assert time.monotonic() < deadline, sandbox.pool.unavailable_reason
                await asyncio.sleep(0.2)
            pool = sandbox.pool.pools[0]
            for pooled in list(pool._mine):  # every warm one: the next item cannot dodge it
                await asyncio.to_thread(pooled.container.kill)
            await asyncio.sleep(1.0)  # its end of the stream closes
            return await sandbox.execute(CORRECT)
        finally:
            await sandbox.stop()

    result = asyncio.run(scenario())
    assert [t.status for t in result.tests] == ["passed"], result


def test_a_container_that_dies_under_a_run_while_its_engine_serves_is_the_runs_death(
        caplog: pytest.LogCaptureFixture) -> None:
    """Its harness killed mid-run (from outside here, as the memory backstop kills it), the
    engine serving and its own stream to the pool (``EngineWatch``) unbroken: the run's death,
    a runtime error, not run again as an engine's drop would be."""
    async def kill(sandbox: Sandbox) -> None:
        pool = sandbox.pool.pools[0]
        assert pool.watch.mark() is not None, "the engine's stream is open"
        (busy,) = pool._mine  # its one container, the run's
        await asyncio.to_thread(busy.container.kill)

    result, _ = asyncio.run(_during_a_run(SandboxConfig(pool_size=1), kill))
    assert [t.status for t in result.tests] == ["runtime_error"], result
    assert "the sandbox container died" in result.tests[0].stderr, result
    assert "dropped every stream" not in caplog.text


def test_a_session_container_that_dies_under_a_cell_while_its_engine_serves_is_the_sessions(
        ) -> None:
    """The same for a session: its container killed under a cell (as the memory backstop
    kills it), the engine and its stream to the pool unbroken: the session's death (DIED),
    not the sandbox's unavailability."""
    from sandbox.sessions import DIED

    async def scenario() -> Any:
        sandbox = Sandbox(SandboxConfig(pool_size=1))
        await sandbox.start()
        try:
            async with session_in(sandbox) as session:
                assert sandbox.pool.pools[0].watch.mark() is not None, "the stream is open"
                cell = asyncio.create_task(session.run("import time; time.sleep(5); 1", 10.0))
                await asyncio.sleep(1.0)
                await asyncio.to_thread(session._pooled.container.kill)
                return await cell
        finally:
            await sandbox.stop()

    result = asyncio.run(scenario())
    assert result.ended == DIED and result.out_of_memory, result
