"""A sandbox started in-process (``sandbox.runner.Sandbox``) for the fault tests that stop,
wedge or restart its engine under it: waiting for its pool, and a session on it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from sandbox.config import SandboxConfig
from sandbox.runner import Sandbox
from sandbox.sessions import SandboxSession, SessionLimits


async def until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    """``check()`` polled until true: a bound against a hang, never a timing asserted."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.2)


async def filled(config: SandboxConfig) -> Sandbox:
    """A started sandbox whose pools are full (every engine's ``pool_size`` warm)."""
    sandbox = Sandbox(config)
    await sandbox.start()
    try:
        await until(lambda: sandbox.pool.idle == len(sandbox.pool.pools) * config.pool_size,
                    120, "the pool filled")
    except BaseException:
        await sandbox.stop()
        raise
    return sandbox


@asynccontextmanager
async def session_in(sandbox: Sandbox) -> AsyncIterator[SandboxSession]:
    """A session (256 MB, 1 MiB of output) in a container of its own on ``sandbox``."""
    threads = ThreadPoolExecutor(2)
    try:
        yield await SandboxSession.open(sandbox.pool, SessionLimits(256, 1 << 20), threads, {},
                                        idle_exit_s=300)
    finally:
        threads.shutdown()
