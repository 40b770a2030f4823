"""The slow lane in front of a real TimeoutPool, as the math verifier uses it: a request
behind a slow batch waits for one task and not the batch; a budget cuts what other callers
kept waiting (never what the request's own tasks did) and says so (``not_run``); a timeout
the machine's load cannot have caused is remembered at once, any other the second time; work
in several turns lets another caller in between."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from reward_server.fair_queue import BudgetSpent, request_scope
from reward_server.process_pool import TaskResult, TimeoutPool
from reward_server.slow_lane import Done, LaneVerdicts, SlowLane, Turn
from tests.helpers.pool_tasks import pid_after, spin

pytestmark = pytest.mark.slow  # worker processes running into their time limits: seconds a test

Outcome = TaskResult | BudgetSpent


def lane_for(pool: TimeoutPool, remember_s: float = 60.0) -> SlowLane[Outcome]:
    return SlowLane("unit", pool.slots, cache_size=0, remember_timeouts_s=remember_s,
                    verdicts=LaneVerdicts(
                        cacheable=lambda r: isinstance(r, TaskResult) and r.outcome == "ok",
                        remembered=lambda r, age_s: r._replace(  # type: ignore[union-attr]
                            detail=f"{r.detail} (remembered)")))


async def run(lane: SlowLane[Outcome], pool: TimeoutPool, fn, *args, timeout: float) -> Outcome:
    """What MathVerifier._compare does with one task."""
    async def work(turn: Turn) -> Done[Outcome]:
        async with turn.slot() as held:
            task = await pool.run(fn, *args, timeout=timeout)
            held.cost_s = task.cost_s
        certain = {"timeout": task.cpu_bound, "memory": True}.get(task.outcome)
        return Done(task, timeout=certain)

    return await lane.run((fn.__qualname__, args, timeout), work, not_run=BudgetSpent)


def granted_turns(lane: SlowLane) -> float:
    """How many turns the lane's gate has granted (its queue-wait observations)."""
    return REGISTRY.get_sample_value("reward_queue_wait_seconds_count",
                                     {"verifier": lane.name}) or 0.0


@pytest.fixture
def pool() -> Iterator[TimeoutPool]:
    p = TimeoutPool(workers=2, memory_mb=512)
    yield p
    p.close()


@pytest.fixture
def one() -> Iterator[TimeoutPool]:
    p = TimeoutPool(workers=1, memory_mb=512)
    yield p
    p.close()


async def test_a_request_behind_a_slow_batch_waits_for_one_task_not_the_batch(
        pool: TimeoutPool) -> None:
    lane = lane_for(pool, remember_s=0)
    finished: list[str] = []

    async def task(tag: str, fn, *args, timeout: float) -> None:
        await run(lane, pool, fn, *args, timeout=timeout)
        finished.append(tag)

    async def slow_batch() -> None:
        with request_scope(None):
            await asyncio.gather(*(task(f"slow{k}", spin, timeout=1.0 + k / 100)
                                   for k in range(6)))

    async def honest() -> None:
        await asyncio.sleep(0.3)  # both workers now spin; four slow tasks wait
        with request_scope(None):
            await asyncio.gather(*(task("honest", pid_after, 0.0, timeout=5.0)
                                   for _ in range(4)))

    await asyncio.gather(slow_batch(), honest())
    # first come, first served would finish all six slow tasks first
    assert finished.index("honest") < 3 and finished[:6].count("honest") == 4, finished


async def test_budget_cuts_tasks_other_callers_kept_waiting_and_a_timeout_is_remembered(
        one: TimeoutPool) -> None:
    lane = lane_for(one)

    async def hog() -> list[Outcome]:
        with request_scope(None, caller="hog"):
            return await asyncio.gather(*(run(lane, one, spin, timeout=1.0 + k / 100)
                                          for k in range(2)))

    hogging = asyncio.ensure_future(hog())
    await asyncio.sleep(0.1)
    with request_scope(0.5, caller="me"):
        out = await asyncio.gather(*(run(lane, one, spin, timeout=1.5 + k / 100)
                                     for k in range(2)))
    assert all(isinstance(e, BudgetSpent) and "budget of 0.5 s" in str(e) for e in out), out
    assert [r.outcome for r in await hogging] == ["timeout", "timeout"]  # type: ignore[union-attr]
    # remembered for its caller at once if the spin had its CPU (this machine may be busy),
    # else at its second timeout: by the third call it is never run again
    with request_scope(None, caller="hog"):
        again = await run(lane, one, spin, timeout=1.0)
        assert again.outcome == "timeout"  # type: ignore[union-attr]
        granted = granted_turns(lane)
        third = await run(lane, one, spin, timeout=1.0)
    assert third.outcome == "timeout" and "remembered" in (third.detail or "")  # type: ignore[union-attr]
    assert granted_turns(lane) == granted  # answered from memory: it never reached the gate
    assert (await run(lane, one, pid_after, 0.0, timeout=5.0)).outcome == "ok"  # type: ignore[union-attr]


async def test_a_requests_own_slow_tasks_never_cut_its_others(one: TimeoutPool) -> None:
    lane = lane_for(one)
    with request_scope(0.5):
        out = await asyncio.gather(*(run(lane, one, spin, timeout=0.5 + k / 100)
                                     for k in range(3)))
    assert [getattr(r, "outcome", r) for r in out] == ["timeout"] * 3, out


async def test_a_timeout_the_load_may_have_caused_is_believed_the_second_time(
        one: TimeoutPool) -> None:
    """A task that waits (as one starved of CPU by its neighbours does) past its limit: its
    first timeout is not remembered, so a correct item slowed by load gets a fair second
    run; a second timeout of the same task is."""
    lane = lane_for(one)
    first = await run(lane, one, time.sleep, 5.0, timeout=0.5)
    assert first.outcome == "timeout" and "remembered" not in (first.detail or "")  # type: ignore[union-attr]
    started = time.monotonic()
    second = await run(lane, one, time.sleep, 5.0, timeout=0.5)  # ran again
    assert second.outcome == "timeout" and "remembered" not in (second.detail or "")  # type: ignore[union-attr]
    assert time.monotonic() - started >= 0.4
    third = await run(lane, one, time.sleep, 5.0, timeout=0.5)
    assert third.outcome == "timeout" and "remembered" in (third.detail or "")  # type: ignore[union-attr]


async def test_a_remembered_timeout_is_its_callers_own() -> None:
    """A timeout may be the load's doing, and another caller can make load: one caller's
    remembered timeout never answers another's copy of the item, which runs."""
    calls: list[str] = []

    async def timing_out(turn: Turn) -> Done[str]:
        async with turn.slot():
            calls.append("run")
        return Done("timeout", timeout=True)

    lane: SlowLane[str] = SlowLane("unit", 1, 0, 60.0, LaneVerdicts(
        cacheable=lambda v: False, remembered=lambda v, age: v + " (remembered)"))
    with request_scope(None, caller="a"):
        assert await lane.run("k", timing_out, str) == "timeout"
        assert await lane.run("k", timing_out, str) == "timeout (remembered)"
    with request_scope(None, caller="b"):
        assert await lane.run("k", timing_out, str) == "timeout"
    assert len(calls) == 2


async def test_work_in_several_turns_lets_another_caller_in_between() -> None:
    """Each ``turn.slot()`` goes back to the gate: a caller that arrives while a long item
    runs waits for one of its turns, not for the whole item."""
    lane: SlowLane[str] = SlowLane("unit", 1, 0, 0, LaneVerdicts(
        cacheable=lambda v: True, remembered=lambda v, age: v))
    log: list[str] = []

    async def long_item(turn: Turn) -> Done[str]:
        for k in range(5):
            async with turn.slot():
                log.append(f"L{k}")
                await asyncio.sleep(0.1)
        return Done("long")

    async def short_item(turn: Turn) -> Done[str]:
        async with turn.slot():
            log.append("S")
        return Done("short")

    async def long_request() -> str:
        with request_scope(None, caller="a"):
            return await lane.run("long", long_item, not_run=str)

    async def short_request() -> str:
        await asyncio.sleep(0.15)
        with request_scope(None, caller="b"):
            return await lane.run("short", short_item, not_run=str)

    assert await asyncio.gather(long_request(), short_request()) == ["long", "short"]
    assert log.index("S") == 2, log  # after the turn that was running when it came


async def test_a_copy_waits_in_its_own_callers_place_not_in_the_queue_of_the_first() -> None:
    """Caller B's item is identical to one queued deep in caller A's batch: it follows that
    computation only once it runs. Coalesced onto A's queued copy, it used to wait for A's
    whole batch (2.2 s, past its budget, never cut); in its own place it waits one item."""
    log: list[str] = []

    def work_of(tag: str):
        async def work(turn: Turn) -> Done[str]:
            async with turn.slot():
                log.append(tag)
                await asyncio.sleep(0.2)
            return Done("ok")
        return work

    lane: SlowLane[str] = SlowLane("unit", 1, 1000, 600.0, LaneVerdicts(
        cacheable=lambda v: True, remembered=lambda v, age: v))

    async def batch_a() -> list[str]:
        with request_scope(60.0, "A"):
            return await asyncio.gather(*(lane.run(("a", k), work_of(f"a{k}"), str)
                                          for k in range(10)),
                                        lane.run("common", work_of("a-common"), str))

    a = asyncio.ensure_future(batch_a())
    await asyncio.sleep(0.05)
    with request_scope(0.3, "B"):
        out = await lane.run("common", work_of("b-common"), lambda why: f"not run: {why}")
    assert (out, await a) == ("ok", ["ok"] * 11)
    assert log.index("b-common") == 1, log  # a0's turn, then its own
    assert log.count("a-common") + log.count("b-common") == 1, log  # and it ran once


async def test_copies_in_flight_run_once_and_what_is_not_cacheable_runs_again() -> None:
    calls: list[str] = []

    async def work(turn: Turn) -> Done[str]:
        async with turn.slot():
            calls.append("run")
            await asyncio.sleep(0.05)
        return Done("v")

    lane: SlowLane[str] = SlowLane("unit", 2, 100, 0, LaneVerdicts(
        cacheable=lambda v: v != "t", remembered=lambda v, age: v))
    assert await asyncio.gather(*(lane.run("k", work, str) for _ in range(5))) == ["v"] * 5
    assert len(calls) == 1  # the first to run ran it for all; the next four followed it
    assert await lane.run("k", work, str) == "v" and len(calls) == 1  # cached

    async def uncacheable(turn: Turn) -> Done[str]:
        async with turn.slot():
            calls.append("t")
        return Done("t")

    await lane.run("t", uncacheable, str)
    await lane.run("t", uncacheable, str)
    assert calls.count("t") == 2  # a timeout (the moment's doing) is computed again

    off: SlowLane[str] = SlowLane("unit", 2, 0, 0, LaneVerdicts(
        cacheable=lambda v: True, remembered=lambda v, age: v))
    calls.clear()
    await asyncio.gather(*(off.run("k", work, str) for _ in range(3)))
    assert len(calls) == 3  # cache off: every copy computed


def turns_of(log: list[str], tag: str, turns: int, result: str = "ok",
             timeout: bool | None = None, cacheable: bool = True):
    """Work of ``turns`` short turns, each logged as ``tag``."""
    async def work(turn: Turn) -> Done[str]:
        for _ in range(turns):
            async with turn.slot():
                log.append(tag)
                await asyncio.sleep(0.02)
        log.append(f"{tag} done")
        return Done(result, timeout=timeout, cacheable=cacheable)
    return work


async def test_a_copy_runs_its_own_when_its_turn_comes_before_another_callers_copy_ends() -> None:
    """Caller A's copy of an item runs, and each of its later turns waits behind A's own
    backlog; caller B's copy used to follow it to its end (behind all of A's items, past
    B's budget: 23.5 s for an 8 s budget in the audit). Now B's copy follows A's only until
    its own turn comes, then runs its own: it ends before A's backlog does."""
    log: list[str] = []
    lane: SlowLane[str] = SlowLane("unit", 1, 1000, 600.0, LaneVerdicts(
        cacheable=lambda v: True, remembered=lambda v, age: v))

    async def batch_a() -> list[str]:
        with request_scope(60.0, "A"):
            common = asyncio.ensure_future(lane.run("common", turns_of(log, "a-common", 3), str))
            await asyncio.sleep(0)  # it takes the free slot first
            rest = [lane.run(("a", k), turns_of(log, f"a{k}", 1), str) for k in range(12)]
            return await asyncio.gather(common, *rest)

    a = asyncio.ensure_future(batch_a())
    while "a-common" not in log:
        await asyncio.sleep(0.005)
    with request_scope(5.0, "B"):
        out = await lane.run("common", turns_of(log, "b-common", 3), lambda w: f"not run: {w}")
    log.append("B answered")
    assert (out, await a) == ("ok", ["ok"] * 13)
    assert log.index("B answered") < log.index("a-common done"), log
    assert log.index("B answered") < log.index("a4 done"), log


@pytest.mark.parametrize("end", ["timeout", "momentary", "hang-up"])
async def test_a_copy_takes_from_another_caller_only_what_the_cache_would(end: str) -> None:
    """A copy of another caller's running item does not take that item's timeout (the load's
    doing, perhaps, which another caller can make), a verdict the moment decided, or the
    end of a computation its client hung up on: it runs its own and gets its own answer
    (within its budget, which ends before that hang-up)."""
    log: list[str] = []
    lane: SlowLane[str] = SlowLane("unit", 2, 1000, 600.0, LaneVerdicts(
        cacheable=lambda v: v == "ok", remembered=lambda v, age: v))
    leader = {"timeout": turns_of(log, "a", 3, "timeout", timeout=True),
              "momentary": turns_of(log, "a", 3, "ok", cacheable=False),
              "hang-up": turns_of(log, "a", 50)}[end]

    async def caller_a() -> str:
        with request_scope(60.0, "A"):
            return await lane.run("k", leader, str)

    a = asyncio.ensure_future(caller_a())
    while "a" not in log:
        await asyncio.sleep(0.005)
    if end == "hang-up":
        asyncio.get_running_loop().call_later(0.5, a.cancel)
    with request_scope(0.2, "B"):
        # B's copy of the same item would pass: its own run says so
        out = await lane.run("k", turns_of(log, "b", 1, "ok"), lambda w: f"not run: {w}")
    assert out == "ok", log
    assert "b done" in log, log
    await asyncio.gather(a, return_exceptions=True)


async def test_a_batch_runs_each_missing_key_once_and_keeps_what_the_lane_keeps() -> None:
    """``run_batch``, as reasoning_gym hands chunks to its workers: cached and remembered
    keys are answered in front, the rest go to the work together, each distinct key once and
    in order; a verdict is cached, a certain timeout remembered for its caller only, a
    not-run neither."""
    handed: list[list[str]] = []

    async def work(keys: list[str]) -> list[Done[str]]:
        handed.append(keys)
        return [Done(f"{k} timeout", timeout=True) if k.startswith("slow") else
                Done(f"{k} not run", cacheable=False) if k.startswith("cut") else
                Done(f"{k} ok") for k in keys]

    lane: SlowLane[str] = SlowLane("unit", 2, 100, 60, LaneVerdicts(
        cacheable=lambda v: v.endswith(" ok"), remembered=lambda v, age: f"{v} (remembered)"))
    with request_scope(None, caller="A"):
        first = await lane.run_batch(["a", "slow", "a", "cut", "b"], work)
        assert first == ["a ok", "slow timeout", "a ok", "cut not run", "b ok"]
        assert handed == [["a", "slow", "cut", "b"]]
        again = await lane.run_batch(["b", "slow", "cut", "c"], work)
        assert again == ["b ok", "slow timeout (remembered)", "cut not run", "c ok"]
        assert handed[1] == ["cut", "c"]
        assert await lane.run_batch(["a", "b"], work) == ["a ok", "b ok"]
        assert len(handed) == 2  # all cached: no work at all
    with request_scope(None, caller="B"):  # another caller's timeout is not B's
        assert await lane.run_batch(["slow"], work) == ["slow timeout"]
        assert handed[2] == ["slow"]
