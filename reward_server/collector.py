"""When Python's cycle collector walks the whole heap: while the server is quiet.

A full collection walks every object the process holds, with the event loop held. Under a
burst of 16,000 one-item requests the server held up to 900,000 objects, and CPython ran a
full collection 23 times in 16 s, each walking all of them (20-280 ms of a held loop; 3.1 s
of the burst's 12 s of CPU) and freeing nothing: a request's objects go by reference
counting. So once the server serves, the allocation counter starts no full collection;
young ones (generations 0 and 1) go on as before and free the cycles that die young (an
exception and its traceback). ``full_collections`` runs the full one itself: when no item
is in flight (the heap is then what start-up froze plus a little, a few ms to walk), at
most every ``QUIET_EVERY_S``, and at the latest ``LATEST_S`` after the last whatever the
load, so that a cycle that outlived its youth is still freed.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("reward_server")

QUIET_EVERY_S = 30.0
LATEST_S = 600.0
CHECK_EVERY_S = 2.0
NEVER = 2**31 - 1  # gen-1 collections before a full one: the counter never gets there


async def full_collections(quiet: Callable[[], bool], clock: Callable[[], float] = time.monotonic,
                           check_every_s: float = CHECK_EVERY_S) -> None:
    """For the server's life (a task the lifespan starts once start-up is done, and cancels):
    what start-up built is frozen out of every collection's walk, the allocation counter
    starts no full collection, and one runs when ``quiet()`` and ``QUIET_EVERY_S`` have
    passed since the last, or once ``LATEST_S`` have. Cancelled, the process's collector is
    as it was (an app run in a test's process leaves it so)."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(before[0], before[1], NEVER)
    last = clock()
    try:
        while True:
            await asyncio.sleep(check_every_s)
            since = clock() - last
            if (since >= QUIET_EVERY_S and quiet()) or since >= LATEST_S:
                started = clock()
                found = gc.collect()
                last = clock()
                log.debug("full collection: %d objects freed in %.3f s", found, last - started)
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
