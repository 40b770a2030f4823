"""The pool's gVisor pids-headroom rule (sandbox/pool.py) and the runner's re-run when a used
gVisor container dies (sandbox/runner.py), without an engine: the engine's count and the
container's death are given; the real ones run in the gVisor tests (test_clean_slate.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from sandbox import runner
from sandbox.channel import ChannelClosed
from sandbox.config import SandboxConfig
from sandbox.pool import EnginePool, PooledContainer
from sandbox.runner import Execution, Sandbox


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


# --- the runner's re-run when a used gVisor container dies (sandbox/runner.py) -----------------


class _Pool:
    """The edge the runner talks to: containers handed out in order; a container with
    ``dies`` set closes its channel under the job."""

    def __init__(self, gvisor: bool, containers: list[tuple[int, bool | str]]) -> None:
        self.pools = [object()]
        self.gvisor = gvisor
        self.queue = [SimpleNamespace(id=f"c{i}", uses=uses, dies=dies, pool=self,
                                      image_id="sha256:test", runtime="runsc" if gvisor else "runc")
                      for i, (uses, dies) in enumerate(containers)]
        self.released: list[tuple[str, bool]] = []
        self.watch = SimpleNamespace(mark=lambda: 0)  # the engine's /events stream: never dropped

    async def acquire(self) -> SimpleNamespace:
        return self.queue.pop(0)

    async def request(self, pooled: SimpleNamespace, job: dict, budget: float) -> dict:
        if pooled.dies == "harness":  # PID 1 raised after the program started (jobs.py)
            return {"status": "ok", "tests": [], "candidate_failed": True,
                    "detail": "the run failed after the program started: OSError: ..."}
        if pooled.dies:
            raise ChannelClosed("the harness closed its output")
        return {"status": "ok", "tests": [{"status": "passed", "time_ms": 1.0}]}

    async def container_lost(self, pooled: SimpleNamespace) -> bool:
        return False  # the engine is up: the container itself died

    async def dropped_by_engine(self, pooled: SimpleNamespace, mark: int | None) -> bool:
        return False  # nor did it restart: every death here is the container's own

    def stalled_under(self, pooled: SimpleNamespace, since: float) -> bool:
        return False  # nor stall

    def release(self, pooled: SimpleNamespace, healthy: bool, by_holder: bool = True) -> None:
        self.released.append((pooled.id, healthy))


def _execute(gvisor: bool, containers: list[tuple[int, bool | str]]
             ) -> tuple[list[str], _Pool]:
    sandbox = Sandbox(SandboxConfig(runtime="runsc" if gvisor else None))
    sandbox.pool = _Pool(gvisor, containers)  # type: ignore[assignment]
    result = asyncio.run(sandbox.execute(Execution("python", "print(1)", (runner.TestCase("", "1"),))))
    return [t.status for t in result.tests], sandbox.pool  # type: ignore[return-value]


def test_gvisor_item_whose_used_container_died_runs_again() -> None:
    statuses, pool = _execute(True, [(5, True), (0, False)])
    assert statuses == ["passed"]
    assert pool.released == [("c0", False), ("c1", True)]  # the dead one replaced


def test_a_second_death_or_a_fresh_container_dying_is_the_programs_doing() -> None:
    assert _execute(True, [(5, True), (3, True)])[0] == ["runtime_error"]
    assert _execute(True, [(0, True)])[0] == ["runtime_error"]
    assert _execute(False, [(5, True)])[0] == ["runtime_error"]  # runc: no re-run


def test_a_harness_failure_after_the_program_started_runs_the_item_again() -> None:
    """Once, it is not shown to be the program's: a fresh container runs the item again and
    its verdict stands (a correct program scored 0 once on a cold server in CI)."""
    for gvisor in (False, True):
        statuses, pool = _execute(gvisor, [(0, "harness"), (0, False)])
        assert statuses == ["passed"]
        assert pool.released == [("c0", False), ("c1", True)]


def test_a_second_harness_failure_is_the_programs_doing() -> None:
    statuses, pool = _execute(False, [(0, "harness"), (0, "harness")])
    assert statuses == []  # no test passed: the verifier scores every expected test failed
    assert pool.released == [("c0", False), ("c1", False)]
