"""FairThread as a unit: slices run one at a time on one thread, and a caller that arrives
behind another's many requests waits for about one of their slices, not all of them (first
come, first served, a neighbour's 40 requests put 40 slices ahead of each of its own)."""

from __future__ import annotations

import asyncio
import threading
import time

from reward_server.fair_queue import request_scope
from reward_server.fair_thread import FairThread


async def test_a_caller_behind_anothers_many_requests_waits_about_one_slice() -> None:
    lane = FairThread("unit-thread")
    ran: list[str] = []
    threads: set[int] = set()

    def work(tag: str) -> str:
        threads.add(threading.get_ident())
        time.sleep(0.02)
        ran.append(tag)
        return tag

    async def one_after_another(tag: str, slices: int) -> None:  # as ifeval and format do
        with request_scope(None, "hostile", slices):
            for k in range(slices):
                assert await lane.run(work, f"{tag}.{k}") == f"{tag}.{k}"

    async def all_at_once(tag: str, slices: int) -> None:  # as math's triage does
        with request_scope(None, "hostile", slices):
            await asyncio.gather(*(lane.run(work, f"{tag}.{k}") for k in range(slices)))

    hostile = [asyncio.ensure_future(one_after_another(f"H{r}", 4)) for r in range(6)]
    hostile.append(asyncio.ensure_future(all_at_once("M", 8)))
    await asyncio.sleep(0.01)  # the hostile caller holds the thread and has slices queued
    with request_scope(None, "other", 1):
        assert await lane.run(work, "other") == "other"
    await asyncio.gather(*hostile)
    assert len(threads) == 1 and len(ran) == 6 * 4 + 8 + 1
    assert ran.index("other") <= 2, ran  # the slice running, maybe one more: not 30
