"""The pool's gVisor pids-headroom rule (sandbox/pool.py), without an engine: the engine's
count is given; the real read runs in the gVisor tests (test_clean_slate.py and others)."""

from __future__ import annotations

import asyncio

from sandbox.config import SandboxConfig
from sandbox.pool import EnginePool, PooledContainer


class _Container:
    id = "c" * 64


class _Channel:
    def close(self) -> None:
        pass


async def _pool_with(runtime: str | None, free: int | None) -> tuple[EnginePool, PooledContainer]:
    engines = EnginePool(SandboxConfig(runtime=runtime, pool_size=1))
    pool = engines.pools[0]
    calls = []

    async def free_pids(pooled: PooledContainer) -> int | None:
        calls.append(pooled)
        return free

    async def remove(container: object) -> None:
        pass

    pool.free_pids = free_pids  # type: ignore[method-assign]
    pool._remove = remove  # type: ignore[method-assign]
    pooled = PooledContainer(_Container(), _Channel(), pool)  # type: ignore[arg-type]
    pool._mine.add(pooled)
    pool._live = 1
    pool.calls = calls  # type: ignore[attr-defined]
    return engines, pooled


async def _run_once(runtime: str | None, free: int | None) -> tuple[EnginePool, PooledContainer]:
    engines, pooled = await _pool_with(runtime, free)
    engines.release(pooled, healthy=True)
    await asyncio.gather(*engines.pools[0]._background)
    return engines, pooled


def test_gvisor_container_with_headroom_is_reused() -> None:
    async def scenario() -> None:
        engines, pooled = await _run_once("runsc", 4000)
        assert engines.pools[0].calls == [pooled]  # type: ignore[attr-defined]
        assert await engines.acquire() is pooled

    asyncio.run(scenario())


def test_gvisor_container_short_of_headroom_or_unreadable_is_replaced() -> None:
    async def scenario(free: int | None) -> None:
        engines, pooled = await _run_once("runsc", free)
        assert pooled.retire
        assert engines.pools[0].fit_for_reuse(pooled) is False
        assert pooled not in engines.pools[0]._mine and engines.pools[0].live == 0

    for free in (SandboxConfig.gvisor_pids_headroom - 1, None):
        asyncio.run(scenario(free))


def test_busy_container_marked_meanwhile_is_replaced_when_given_back() -> None:
    async def scenario() -> None:
        engines, pooled = await _pool_with("runsc", 10)
        pooled.retire = True  # marked by the check that ran beside this execution
        engines.release(pooled, healthy=True)
        assert pooled not in engines.pools[0]._mine and engines.idle == 0

    asyncio.run(scenario())


def test_runc_containers_are_never_read() -> None:
    async def scenario() -> None:
        engines, pooled = await _run_once(None, None)
        assert engines.pools[0].calls == []  # type: ignore[attr-defined]
        assert await engines.acquire() is pooled

    asyncio.run(scenario())
