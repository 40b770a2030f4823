"""Who pays for a container's start and removal: the caller that caused it, in its own turn
at the sandbox's fair gate, never the warm pool nor a neighbour's turn. A session's and a
``/run_jupyter`` run's container is started for it and removed in its caller's slot (it took
a warm one from the pool, whose replacement no one's turn paid for, and its removal held no
slot: a caller looping ``/run_jupyter`` at its cap slowed a neighbour's ``/run_code`` about
tenfold); a container a program spoiled is replaced in its caller's slot, after the verdict;
and a closed session's container counts against the caps until it is gone, which the 429
says. In process, on the real engine: every container start and removal is recorded with
the caller whose request it ran in and whether that caller held a slot then (events and their
order, never the clock)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass, field
from typing import Any

import pytest

from reward_server.callers import Caller, quota_key
from reward_server.errors import TooManySessions
from reward_server.fair_queue import current_request, request_scope
from reward_server.run_code.schemas import RunCodeRequest
from reward_server.run_code.service import run_code
from reward_server.run_code.session_schemas import CreateSessionRequest
from reward_server.run_code.sessions import Sessions
from reward_server.sandbox_service import SPARE_CONTAINERS, SandboxService
from reward_server.scoring import Scorer
from reward_server.settings import settings_class
from sandbox.pool import ContainerPool

pytestmark = pytest.mark.usefixtures("docker_ready")

POOL = 2
HOSTILE, NEIGHBOUR, HOLDER = (Caller(name, name) for name in ("hostile", "neighbour", "holder"))


@dataclass
class Events:
    """("start" | "remove" | "reply", the caller whose request it ran in (None: none's, the
    pool's own), how many gate slots that caller held then)."""

    service: SandboxService
    seen: list[tuple[str, Hashable, int]] = field(default_factory=list)

    def record(self, what: str) -> None:
        scope = current_request()
        caller = None if scope is None else quota_key(scope.caller)
        held = 0 if scope is None else self.service.gate.holding(caller)
        self.seen.append((what, caller, held))

    def lifecycle(self) -> list[tuple[str, Hashable, int]]:
        return [e for e in self.seen if e[0] != "reply"]


@dataclass
class Server:
    service: SandboxService
    scorer: Scorer
    sessions: Sessions
    events: Events


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Server]:
    settings = settings_class()(sandbox_pool_size=POOL, sandbox_session_max_per_caller=1,
                                sandbox_session_reserve=0, cache_size=0)
    service = SandboxService.of(settings)
    assert service is not None
    scorer = Scorer({}, settings)
    events = Events(service)
    create, remove, request = ContainerPool._create, ContainerPool._remove, ContainerPool.request

    async def recorded_create(self: ContainerPool) -> Any:
        events.record("start")
        return await create(self)

    async def recorded_remove(self: ContainerPool, container: Any) -> None:
        events.record("remove")
        await remove(self, container)

    async def recorded_request(self: ContainerPool, *args: Any, **kwargs: Any) -> Any:
        reply = await request(self, *args, **kwargs)
        events.record("reply")
        return reply

    monkeypatch.setattr(ContainerPool, "_create", recorded_create)
    monkeypatch.setattr(ContainerPool, "_remove", recorded_remove)
    monkeypatch.setattr(ContainerPool, "request", recorded_request)
    await service.start()
    try:
        deadline = time.monotonic() + 180  # a bound against a hang, not a speed goal
        while service.sandbox.pool.idle < POOL + SPARE_CONTAINERS:
            assert time.monotonic() < deadline, service.sandbox.pool.unavailable_reason
            await asyncio.sleep(0.1)
        events.seen.clear()  # the warm pool's own starts
        async with Sessions(scorer, service) as sessions:
            yield Server(service, scorer, sessions, events)
    finally:
        await service.stop()


async def test_a_sessions_container_is_started_and_removed_in_its_callers_turn(
        server: Server) -> None:
    sessions = server.sessions
    for _ in range(2):  # /run_jupyter's way: a transient session, its cells, its end
        async with sessions.transient(HOSTILE, -1, {}) as session:
            status, ran = await sessions.run_transient(session, ["1 + 1"], 0, 30)
            assert (status, ran.status) == (200, "Success"), ran
    info = await sessions.create(HOSTILE, CreateSessionRequest())
    await sessions.close(HOSTILE, info.session_id)
    # three containers, each started and removed while its caller held a slot; none started
    # for the pool, which no session drained
    assert server.events.lifecycle() == [("start", "hostile", 1), ("remove", "hostile", 1)] * 3
    assert server.service.sandbox.pool.idle == POOL + SPARE_CONTAINERS


async def test_a_spoiled_container_is_replaced_in_its_callers_turn_after_the_verdict(
        server: Server) -> None:
    spoiler = RunCodeRequest(code="import time\ntime.sleep(60)", language="python",
                             run_timeout=0.5)
    status, response = await run_code(server.scorer, server.service, spoiler, HOSTILE)
    assert status == 200 and response.run_result is not None, response
    assert response.run_result.status == "TimeLimitExceeded", response
    honest = RunCodeRequest(code="print(1)", language="python")
    status, response = await run_code(server.scorer, server.service, honest, NEIGHBOUR)
    assert (status, response.status) == (200, "Success"), response
    # the verdict first, then the spoiled container removed and its replacement started,
    # both in the spoiler's slot; the neighbour's turn starts and removes nothing
    assert server.events.seen == [("reply", "hostile", 1), ("remove", "hostile", 1),
                                  ("start", "hostile", 1), ("reply", "neighbour", 1)]
    assert server.service.sandbox.pool.idle == POOL + SPARE_CONTAINERS


async def test_a_closed_sessions_container_counts_against_the_cap_until_removed(
        server: Server) -> None:
    sessions, gate = server.sessions, server.service.gate
    info = await sessions.create(HOSTILE, CreateSessionRequest())
    held, free = asyncio.Event(), asyncio.Event()

    async def hold_every_slot() -> None:  # another caller's turns, running
        with request_scope(None, HOLDER, gate.slots):
            async with gate.slot(), gate.slot():
                held.set()
                await free.wait()

    holder = asyncio.create_task(hold_every_slot())
    await held.wait()
    closing = asyncio.create_task(sessions.close(HOSTILE, info.session_id))
    while sessions.of_caller(HOSTILE):  # no longer listed once closed
        await asyncio.sleep(0)
    assert not closing.done()  # its removal waits for the caller's turn
    with pytest.raises(TooManySessions, match="1 of them closed, their containers being "
                                              "removed"):
        await sessions.create(HOSTILE, CreateSessionRequest())
    free.set()
    await asyncio.gather(holder, closing)
    assert server.events.lifecycle()[-1] == ("remove", "hostile", 1)
    again = await sessions.create(HOSTILE, CreateSessionRequest())  # removed: its place is free
    await sessions.close(HOSTILE, again.session_id)
