"""A dockerd restarted under live-restore (an operator's ``"live-restore": true``, kept so that
an upgrade does not stop the containers), or quicker than the health checks: it answers by the
time anyone asks, and every attach stream it served ended with the old process. A run in
flight was scored a runtime error (0), a session's next cell a death at its memory limit, a
scoring chunk an error (0). Each pool's own /events stream (``sandbox.engine_watch``) ends with
them, which no container can bring about. A dockerd that stalls (SIGSTOP here) past a
run's deadline and resumes before it is asked ends no stream but holds them: the answer
came late, and the run was scored a timeout; the watch's unanswered pings tell it. On a
second engine of the module's own.

The restart is quicker than any health check here: the checks that would find the engine
gone for a moment are held until it is back (``_held_until``), as a restart that
takes less than their second apart is. Without that, whether a check falls inside the
restart's gap is the machine's timing, and a check that does finds the engine gone, which
the pool already handles."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import pytest

from sandbox import runner, sessions
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxUnavailable
from sandbox.pool import ContainerPool
from sandbox.runner import Execution, ExecutionResult, Sandbox
from sandbox.testing import ExtraEngine
from tests.helpers.sandboxes import filled, session_in

SLOW_CORRECT = Execution("python", "import time\ntime.sleep(3)\nprint(int(input()) + 1)\n",
                         (runner.TestCase("1", "2"),))
SLOW_ENOUGH = Execution("python", "import time\ntime.sleep(1.5)\nprint(int(input()) + 1)\n",
                        (runner.TestCase("1", "2"),))
def _config(engine: ExtraEngine) -> SandboxConfig:
    # the maintainer's checks an hour apart: only the run's own checks see the restart
    return SandboxConfig(docker_hosts=(engine.host,), pool_size=2, health_interval_s=3600,
                         health_timeout_s=2.0)


def _held_until(pool: ContainerPool, event: asyncio.Event, check: str) -> None:
    """The pool's ``check`` (an engine check) waits for ``event``: what the test does to the
    engine ended before anyone asked."""
    original = getattr(pool, check)

    async def asked_after() -> object:
        await event.wait()
        return await original()

    setattr(pool, check, asked_after)


async def _outcome(work: Awaitable[object]) -> object:
    """``work``'s result, or the SandboxUnavailable it raised (the engine's loss)."""
    try:
        return await work
    except SandboxUnavailable as exc:
        return exc


async def _restarted_under(engine: ExtraEngine, work: Callable[[Sandbox], Awaitable[object]],
                           after_s: float, **changes: float) -> object:
    """``work(sandbox)``'s result (or the SandboxUnavailable it raised), the engine
    restarted under live-restore ``after_s`` into it (``_config`` with ``changes``)."""
    sandbox = await filled(replace(_config(engine), **changes))
    try:
        back = asyncio.Event()
        _held_until(sandbox.pool.pools[0], back, "engine_alive")
        task = asyncio.ensure_future(work(sandbox))
        await asyncio.sleep(after_s)
        await asyncio.to_thread(engine.restart)
        back.set()
        return await _outcome(task)
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
                return await _outcome(session.run("x + 1", 5.0))
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


# --- a dockerd that stalls past a run's deadline and recovers -----------------------------------

@contextlib.asynccontextmanager
async def _stalled_engine_resumed_before_asked(engine: ExtraEngine, sandbox: Sandbox
                                               ) -> AsyncIterator[Callable[[float], Awaitable[None]]]:
    """A ``stall(seconds)`` that stops dockerd (SIGSTOP) for that long; the pool's engine
    check waits for the resume, as a check made after it would."""
    resumed = asyncio.Event()

    async def stall(seconds: float) -> None:
        os.kill(engine.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        try:
            await asyncio.sleep(seconds)
        finally:
            os.kill(engine.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
        resumed.set()

    _held_until(sandbox.pool.pools[0], resumed, "settled_state")
    yield stall


def test_a_run_whose_engine_stalled_past_its_deadline_runs_again_not_scored_timeout(
        stoppable_engine: ExtraEngine, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """dockerd stopped (SIGSTOP) while a correct program runs, and resumed after the run's
    deadline but before its engine is asked: the harness answered in time into a stream
    dockerd held, and the engine serves when asked, so the silence was scored the program's
    timeout (0). The watch's pings went unanswered meanwhile, which no program can bring
    about: the item runs again. The run's outside slack is cut to 2 s to keep the stall short;
    the engine check waits for the resume (``settled_state``), as a check after it would."""
    monkeypatch.setattr(runner, "OUTSIDE_SLACK_S", 2.0)

    async def scenario() -> object:
        sandbox = await filled(replace(_config(stoppable_engine), item_budget_s=3.0))
        try:
            async with _stalled_engine_resumed_before_asked(stoppable_engine, sandbox) as stall:
                task = asyncio.ensure_future(sandbox.execute(SLOW_ENOUGH))
                await asyncio.sleep(0.5)  # the job is sent; the program sleeps 1.5 s
                await stall(3.0 + 2.0 + 3.0)  # past the deadline and STALL_S
                return await task
        finally:
            await sandbox.stop()

    result = asyncio.run(scenario())
    assert _passed(result), result
    assert "while its engine stalled" in caplog.text


def test_a_session_whose_engine_stalled_past_a_cells_deadline_is_the_sandboxs_loss(
        stoppable_engine: ExtraEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same stall under a session's cell: its answer was held in the stalled dockerd, so
    the cell did not run past its limit (before: ``DIED``, "did not answer"); the session is
    lost to its engine (SandboxUnavailable), its next request's stream out of step."""
    monkeypatch.setattr(sessions, "OUTSIDE_SLACK_S", 1.0)

    async def scenario() -> object:
        sandbox = Sandbox(_config(stoppable_engine))
        await sandbox.start()
        try:
            async with session_in(sandbox) as session, \
                    _stalled_engine_resumed_before_asked(stoppable_engine, sandbox) as stall:
                task = asyncio.ensure_future(session.run("import time\ntime.sleep(1.5)\n"
                                                         "print(2)", 3.0))
                await asyncio.sleep(0.5)
                await stall(3.0 + 1.0 + 1.0 + 3.0)  # past the cell's budget and STALL_S
                return await _outcome(task)
        finally:
            await sandbox.stop()

    result = asyncio.run(scenario())
    assert isinstance(result, SandboxUnavailable), result
    assert "stalled under the cell" in str(result), result
