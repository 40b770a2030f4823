"""The server's cycle collector: full collections leave the allocation counter once the
server serves, and run when no item is in flight (or at the latest after LATEST_S), never
under a burst, whose heap a full collection would walk with the event loop held."""

from __future__ import annotations

import asyncio
import gc

import pytest

from reward_server import collector


async def test_full_collections_leave_the_allocation_counter_while_it_runs() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    task = asyncio.create_task(collector.full_collections(lambda: False))
    await asyncio.sleep(0.01)
    young, middle, full = gc.get_threshold()
    assert (young, middle) == before[:2] and full == collector.NEVER
    assert gc.get_freeze_count() > frozen
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0  # as it was


async def test_a_full_collection_waits_for_quiet_or_the_latest(monkeypatch) -> None:
    now = [0.0]
    ran: list[float] = []
    monkeypatch.setattr(collector.gc, "collect", lambda: ran.append(now[0]) or 0)
    busy = [True]
    task = asyncio.create_task(collector.full_collections(lambda: not busy[0],
                                                          clock=lambda: now[0],
                                                          check_every_s=0.001))

    async def at(t: float) -> None:
        now[0] = t
        await asyncio.sleep(0.02)  # several checks at this time

    try:
        await at(0.0)  # started: the last collection counts from now
        await at(collector.QUIET_EVERY_S + 1)
        assert ran == []  # busy: not yet
        busy[0] = False
        await at(collector.QUIET_EVERY_S + 2)
        assert ran == [collector.QUIET_EVERY_S + 2]  # quiet: once, not at every check
        await at(collector.QUIET_EVERY_S + 3)
        assert len(ran) == 1  # QUIET_EVERY_S since the last has not passed
        busy[0] = True
        last = ran[-1]
        await at(last + collector.LATEST_S - 1)
        assert len(ran) == 1  # busy all along: not before the latest
        await at(last + collector.LATEST_S)
        assert ran[-1] == last + collector.LATEST_S  # busy, but the latest came
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
