"""A dockerd restarted under live-restore (an operator's ``"live-restore": true``, kept so that
an upgrade does not stop the containers), or quicker than the health checks: it answers by the
time anyone asks, and every attach stream it served ended with the old process. A run in
flight was scored a runtime error (0), a session's next cell a death at its memory limit, a
scoring chunk an error (0). Each pool's own /events stream (``sandbox.engine_watch``) ends with
them, which no container can bring about. On a second engine of the module's own.

The restart is quicker than any health check here: the checks that would find the engine
gone for a moment are held until it is back (``_back_before_asked``), as a restart that
takes less than their second apart is. Without that, whether a check falls inside the
restart's gap is the machine's timing, and a check that does finds the engine gone, which
the pool already handles."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest

from sandbox import runner
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxUnavailable
from sandbox.pool import ContainerPool
from sandbox.runner import Execution, ExecutionResult, Sandbox
from sandbox.testing import ExtraEngine
from tests.helpers.sandboxes import filled, session_in

SLOW_CORRECT = Execution("python", "import time\ntime.sleep(3)\nprint(int(input()) + 1)\n",
                         (runner.TestCase("1", "2"),))
def _config(engine: ExtraEngine) -> SandboxConfig:
    # the maintainer's checks an hour apart: only the run's own checks see the restart
    return SandboxConfig(docker_hosts=(engine.host,), pool_size=2, health_interval_s=3600,
                         health_timeout_s=2.0)


def _back_before_asked(pool: ContainerPool, back: asyncio.Event) -> None:
    """The pool's ping waits for ``back``: the restart ended before anyone asked."""
    alive = pool.engine_alive

    async def asked_once_back() -> bool:
        await back.wait()
        return await alive()

    pool.engine_alive = asked_once_back  # type: ignore[method-assign]


async def _restarted_under(engine: ExtraEngine, work: Callable[[Sandbox], Awaitable[object]],
                           after_s: float, **changes: float) -> object:
    """``work(sandbox)``'s result (or the SandboxUnavailable it raised), the engine
    restarted under live-restore ``after_s`` into it (``_config`` with ``changes``)."""
    sandbox = await filled(replace(_config(engine), **changes))
    try:
        back = asyncio.Event()
        _back_before_asked(sandbox.pool.pools[0], back)
        task = asyncio.ensure_future(work(sandbox))
        await asyncio.sleep(after_s)
        await asyncio.to_thread(engine.restart)
        back.set()
        try:
            return await task
        except SandboxUnavailable as exc:
            return exc
    finally:
        await sandbox.stop()


def _passed(result: object) -> bool:
    return isinstance(result, ExecutionResult) and [t.status for t in result.tests] == [
        "passed"]


def test_a_run_in_flight_through_a_live_restore_restart_runs_again_not_scored_0(
        stoppable_engine: ExtraEngine, caplog: pytest.LogCaptureFixture) -> None:
    with stoppable_engine.live_restore():
        result = asyncio.run(_restarted_under(
            stoppable_engine, lambda sandbox: sandbox.execute(SLOW_CORRECT), after_s=1.0))
    assert _passed(result), result
    assert "as its engine dropped every stream" in caplog.text


def test_a_session_whose_engine_restarted_between_cells_is_the_sandboxs_loss(
        stoppable_engine: ExtraEngine) -> None:
    """A session idle through a live-restore restart: its stream went with the old dockerd,
    and its next cell finds it gone. Its own cells did nothing to earn a death (before, the
    cell was a ``DIED``, blamed on the session's memory); the session is lost to its engine
    (SandboxUnavailable)."""
    async def scenario() -> object:
        sandbox = Sandbox(_config(stoppable_engine))
        await sandbox.start()
        try:
            async with session_in(sandbox) as session:
                first = await session.run("x = 1\nprint(x)", 5.0)
                assert first.stdout.strip() == "1", first
                await asyncio.to_thread(stoppable_engine.restart)
                try:
                    return await session.run("x + 1", 5.0)
                except SandboxUnavailable as exc:
                    return exc
        finally:
            await sandbox.stop()

    with stoppable_engine.live_restore():
        result = asyncio.run(scenario())
    assert isinstance(result, SandboxUnavailable), result
    assert "dropped its streams" in str(result), result


# reasoning_gym's scorer in the sandbox (sandbox/scoring.py): the right answer to one entry
ENTRY = {"question": "Calculate 5 - 3 - 6.", "answer": "-4",
         "metadata": {"source_dataset": "basic_arithmetic", "source_index": 0,
                      "expression": "5 - 3 - 6", "num_terms": 3, "num_digits": 1,
                      "difficulty": {"num_terms": [2, 6], "num_digits": [1, 4]}}}


def test_a_scoring_chunk_in_flight_through_a_live_restore_restart_is_scored_again(
        stoppable_engine: ExtraEngine, caplog: pytest.LogCaptureFixture) -> None:
    """The in-sandbox scorers' chunks follow the same rule as executions: a right answer's
    chunk whose stream the engine dropped is scored again, not 0 for "its memory limit".
    Containers at 5% of a CPU, so that the scorer's cold start keeps the chunk in flight."""
    from sandbox.scoring import ScoringLimits, score_chunk

    limits = ScoringLimits(timeout_s=5.0, memory_mb=512, turn_s=5.0)
    item = ("basic_arithmetic", "-4", ENTRY, "null")
    with stoppable_engine.live_restore():
        result = asyncio.run(_restarted_under(
            stoppable_engine, lambda sandbox: score_chunk(sandbox, "reasoning_gym", [item],
                                                          limits), after_s=2.0, cpus=0.05))
    assert isinstance(result, list) and [(r.status, r.score) for r in result] == [("ok", 1.0)], \
        result
    assert "as its engine dropped every stream" in caplog.text
