"""FairGate as a unit: a request that arrives behind a slow batch takes the next free slot,
items of one request keep their order, a budget cuts what still waits, and nothing leaks
a slot (cancelled waiters, budget cuts, work outside any request)."""

from __future__ import annotations

import asyncio

import pytest

from reward_server import metrics
from reward_server.callers import Caller, quota_of
from reward_server.fair_queue import BudgetSpent, FairGate, current_request, request_scope
from reward_server.fair_shares import Share


async def item(gate: FairGate, tag: str, hold_s: float, log: list[str]) -> str:
    async with gate.slot():
        log.append(tag)
        await asyncio.sleep(hold_s)
    return tag


def in_request(budget_s: float | None, *coros_of, caller: str | None = None,
               items: int | None = None) -> asyncio.Future:
    """Run the coroutines of one request (one scope, like one HTTP request) concurrently."""
    async def main() -> list:
        with request_scope(budget_s, caller, items):
            return await asyncio.gather(*(make() for make in coros_of), return_exceptions=True)
    return asyncio.ensure_future(main())


async def test_newcomer_takes_the_next_free_slot_not_the_back_of_the_queue() -> None:
    gate, log = FairGate(2, "unit"), []
    slow = in_request(None, *(lambda k=k: item(gate, f"A{k}", 0.3, log) for k in range(8)))
    await asyncio.sleep(0.1)  # A holds both slots and has 6 items queued
    fast = in_request(None, *(lambda k=k: item(gate, f"B{k}", 0.01, log) for k in range(5)))
    assert await fast == [f"B{k}" for k in range(5)]
    # every B item ran before A's third: B waited for one of A's items, not for A's batch
    assert log[:2] == ["A0", "A1"] and log[2:7] == [f"B{k}" for k in range(5)]
    await slow
    assert log[7:] == [f"A{k}" for k in range(2, 8)]  # one request's items keep their order
    assert (gate.running, gate.waiting, gate.requests) == (0, 0, 0)


async def test_equal_requests_alternate() -> None:
    gate, log = FairGate(1, "unit"), []
    a = in_request(None, *(lambda k=k: item(gate, "a", 0.02, log) for k in range(4)))
    b = in_request(None, *(lambda k=k: item(gate, "b", 0.02, log) for k in range(4)))
    await asyncio.gather(a, b)
    # equal items: the one served less goes next, so neither gets two turns ahead
    assert all(abs(log[:n].count("a") - log[:n].count("b")) <= 2 for n in range(len(log)))


async def test_a_request_is_charged_the_cost_its_items_report_not_the_time_held() -> None:
    gate, log = FairGate(1, "unit"), []

    async def waits_for_a_replacement(tag: str) -> None:
        async with gate.slot() as held:
            log.append(tag)
            await asyncio.sleep(0.1)  # e.g. a worker killed by someone else, being replaced
            held.cost_s = 0.0  # what the item itself cost there

    a = in_request(None, *(lambda k=k: waits_for_a_replacement(f"A{k}") for k in range(3)))
    await asyncio.sleep(0.05)
    b = in_request(None, *(lambda k=k: item(gate, f"B{k}", 0.1, log) for k in range(3)))
    await asyncio.gather(a, b)
    # charged by time held, B (level with A at 0.05 s) would have gone second
    assert log == ["A0", "A1", "A2", "B0", "B1", "B2"]


async def test_budget_cuts_what_other_callers_kept_waiting_and_lets_running_items_finish(
) -> None:
    gate, log = FairGate(1, "unit"), []
    before = metrics.BUDGET_CUTS.labels("unit")._value.get()
    hog = in_request(None, *(lambda k=k: item(gate, f"H{k}", 0.2, log) for k in range(6)),
                     caller="hog")
    await asyncio.sleep(0.01)
    out = await in_request(0.3, *(lambda k=k: item(gate, f"A{k}", 0.2, log) for k in range(5)),
                           caller="me")
    await hog
    # A0 ran after H0 (0.19 s shut out, then 0.2 s of its own that the clock skips); the
    # others waited through H1 as well, past 0.3 s shut out, and did not run
    assert out[0] == "A0" and log[:3] == ["H0", "A0", "H1"], (out, log)
    assert all(isinstance(e, BudgetSpent) for e in out[1:]), out
    assert "budget of 0.3 s" in str(out[1]) and "REWARD_SERVER_REQUEST_BUDGET_S" in str(out[1])
    assert metrics.BUDGET_CUTS.labels("unit")._value.get() == before + 4
    assert (gate.running, gate.waiting, gate.requests, gate.callers) == (0, 0, 0, 0)


async def test_a_requests_own_slow_items_never_cut_its_other_items() -> None:
    """Slowness must not buy a null: items that waited behind their own request's slow
    items (or their caller's other requests') all run, however long that takes."""
    gate, log = FairGate(1, "unit"), []
    own = in_request(0.15, *(lambda k=k: item(gate, f"A{k}", 0.1, log) for k in range(5)),
                     caller="me")
    other = in_request(0.15, *(lambda k=k: item(gate, f"B{k}", 0.1, log) for k in range(2)),
                       caller="me")
    assert await own == [f"A{k}" for k in range(5)]
    assert await other == ["B0", "B1"]


async def test_a_stream_of_one_item_requests_does_not_starve_another_callers_batch() -> None:
    """Each newcomer request joins level with the least served; per request, every one of
    them would win against a batch already served once. Shared per caller, the stream pays
    for its own items."""
    gate, log = FairGate(1, "unit"), []
    stream: list[asyncio.Future] = []

    async def send_stream() -> None:
        for k in range(30):
            stream.append(in_request(5.0, lambda k=k: item(gate, f"S{k}", 0.05, log),
                                     caller="streamer"))
            await asyncio.sleep(0.02)

    sender = asyncio.ensure_future(send_stream())
    await asyncio.sleep(0.03)
    victim = await in_request(0.5, *(lambda k=k: item(gate, f"V{k}", 0.01, log)
                                     for k in range(8)), caller="victim")
    assert victim == [f"V{k}" for k in range(8)], victim
    await sender
    await asyncio.gather(*stream)
    # the victim's last item ran long before the stream's last
    assert log.index("V7") < log.index("S20"), log


async def test_cancelled_waiters_leave_no_trace() -> None:
    gate, log = FairGate(1, "unit"), []
    holder = asyncio.ensure_future(item(gate, "h", 0.2, log))
    await asyncio.sleep(0.01)
    waiters = [asyncio.ensure_future(item(gate, f"w{k}", 0.0, log)) for k in range(3)]
    await asyncio.sleep(0.01)
    assert gate.waiting == 3
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert await holder == "h" and log == ["h"]
    assert (gate.running, gate.waiting, gate.requests) == (0, 0, 0)
    assert await item(gate, "after", 0.0, log) == "after"


async def test_work_outside_any_request_is_one_fifo_request() -> None:
    gate, log = FairGate(1, "unit"), []
    assert current_request() is None
    await asyncio.gather(*(item(gate, str(k), 0.01, log) for k in range(5)))
    assert log == ["0", "1", "2", "3", "4"]


async def test_queue_wait_is_observed_and_gauges_return_to_zero() -> None:
    gate = FairGate(1, "unit_metrics")
    histogram = metrics.QUEUE_WAIT.labels("unit_metrics")

    def observed() -> float:
        return next(s.value for m in metrics.QUEUE_WAIT.collect() for s in m.samples
                    if s.name.endswith("_count") and s.labels == {"verifier": "unit_metrics"})

    assert histogram is not None
    await in_request(None, *(lambda: item(gate, "x", 0.01, []) for _ in range(4)))
    assert observed() == 4
    assert metrics.QUEUE_WAITING.labels("unit_metrics")._value.get() == 0
    assert metrics.QUEUE_REQUESTS.labels("unit_metrics")._value.get() == 0


async def test_request_scope_is_inherited_by_tasks_and_counted_in_flight() -> None:
    async def seen() -> object:
        return current_request()

    gauge = metrics.REQUESTS_IN_FLIGHT._value
    start = gauge.get()
    with request_scope(10) as scope:
        assert gauge.get() == start + 1
        assert await asyncio.create_task(seen()) is scope
        assert 9 < (scope.remaining() or 0) <= 10
    assert gauge.get() == start and current_request() is None
    with request_scope(0) as unbudgeted:
        assert unbudgeted.deadline is None and unbudgeted.remaining() is None


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        FairGate(0, "unit")


async def test_a_later_turn_of_an_item_is_never_cut_by_the_budget() -> None:
    """A turn after the first belongs to an item that ran: its own work (0.6 s, past the
    0.5 s budget) must not count as shut-out time, or its tests that ran would be thrown
    away as a null the moment another caller holds the slot."""
    gate = FairGate(1, "unit")

    async def two_turns() -> str:
        async with gate.slot():
            await asyncio.sleep(0.6)
        async with gate.slot(budgeted=False):
            await asyncio.sleep(0.01)
        return "ran"

    async def other() -> None:
        with request_scope(None, "other"):
            await asyncio.sleep(0.55)
            async with gate.slot():
                await asyncio.sleep(0.1)

    with request_scope(0.5, "me"):
        others = asyncio.ensure_future(other())
        assert await two_turns() == "ran"
        await others


async def test_a_caller_that_posts_request_after_request_keeps_what_it_was_served() -> None:
    """A trainer posts a batch, waits for it, posts the next: it has nothing at the gate for
    a few ms each time. Forgotten then, it would join level with the least served each time
    and the gate would share items, not time (B's 10 x 20 ms alternating with A's 300 ms)."""
    gate, log = FairGate(1, "unit"), []
    done = asyncio.Event()

    async def sequential() -> None:
        k = 0
        while not done.is_set():
            with request_scope(60.0, "A"):
                async with gate.slot():
                    log.append(f"A{k}")
                    await asyncio.sleep(0.3)
            k += 1
            await asyncio.sleep(0.005)

    a = asyncio.ensure_future(sequential())
    await asyncio.sleep(0.05)
    await in_request(60.0, *(lambda k=k: item(gate, f"B{k}", 0.02, log) for k in range(10)),
                     caller="B")
    done.set()
    await a
    # B had 0.2 s, A 0.3 s: all of B's items ran before A's second turn (round-robin by
    # items would have interleaved them, A1 after B0)
    assert log.index("B9") < log.index("A1"), log


async def test_a_backlog_of_one_item_requests_does_not_starve_the_same_callers_batch() -> None:
    """A rollout fleet's one-request-per-rollout calls arrive faster than their slow items
    finish. Each its own share, every one of the backlog would go before the caller's batch
    got its second item; as one share they pay for their own items, turn about with it."""
    gate, log = FairGate(1, "unit"), []
    stream: list[asyncio.Future] = []

    async def send_stream() -> None:
        for k in range(40):
            stream.append(in_request(None, lambda k=k: item(gate, f"S{k}", 0.05, log),
                                     caller="fleet", items=1))
            await asyncio.sleep(0.01)

    sender = asyncio.ensure_future(send_stream())
    await asyncio.sleep(0.1)  # a backlog of about 8 single calls
    batch = await in_request(None, *(lambda k=k: item(gate, f"V{k}", 0.01, log)
                                     for k in range(8)), caller="fleet", items=8)
    assert batch == [f"V{k}" for k in range(8)], batch
    await sender
    await asyncio.gather(*stream)
    # one share each: the batch's last item waits for every single call queued before it
    first = log.index("V0")
    assert log.index("V7") - first < 8 + 3, log
    assert [t for t in log if t.startswith("S")] == [f"S{k}" for k in range(40)]  # in order
    assert (gate.running, gate.waiting, gate.requests, gate.callers) == (0, 0, 0, 0)


async def test_a_grant_looks_at_the_shares_running_not_everyone_waiting(monkeypatch) -> None:
    """Thousands of requests in flight: each grant and release weighs the shares that hold
    a slot and the heap's head, not every share waiting (that made the loop stall)."""
    calls = 0
    served = Share.served

    def counted(self: Share, now: float) -> float:
        nonlocal calls
        calls += 1
        return served(self, now)

    monkeypatch.setattr(Share, "served", counted)
    gate, log, go = FairGate(2, "unit"), [], asyncio.Event()

    async def held(tag: str) -> None:
        async with gate.slot():
            log.append(tag)
            await go.wait()

    requests = [in_request(None, lambda k=k: held(str(k)), caller=f"c{k % 500}", items=2)
                for k in range(3000)]
    for _ in range(10):  # every one joins and waits
        await asyncio.sleep(0)
    assert (gate.running, gate.waiting, gate.callers) == (2, 2998, 500)
    calls = 0
    go.set()
    await asyncio.gather(*requests)
    assert len(log) == 3000
    assert calls < 20 * 3000, calls  # a few per grant; a walk over the callers: 1.5 million
    assert (gate.running, gate.waiting, gate.requests, gate.callers) == (0, 0, 0, 0)


async def test_a_closed_gate_answers_its_waiting_items_and_lets_running_ones_finish() -> None:
    """Stopping (reward_server/drain.py): every waiting item of every caller and request,
    and any that comes later, gets ServerStopping at once; running items finish and release
    their slots; nothing is left counted."""
    from reward_server.errors import ServerStopping

    gate = FairGate(2, "unit")
    log: list[str] = []
    running = in_request(None, lambda: item(gate, "r0", 0.3, log),
                         lambda: item(gate, "r1", 0.3, log), caller="a")
    await asyncio.sleep(0.05)
    waiting = [in_request(None, *[lambda k=k: item(gate, f"w{k}", 0.0, log)
                                  for k in range(3)], caller=c) for c in ("a", "b", "c")]
    singles = [in_request(None, lambda: item(gate, "s", 0.0, log), caller="b", items=1)
               for _ in range(5)]
    await asyncio.sleep(0.05)
    assert gate.waiting == 14 and gate.running == 2
    gate.close()
    for request in [*waiting, *singles]:
        assert all(isinstance(r, ServerStopping) for r in await request)
    assert await running == ["r0", "r1"]
    assert (gate.waiting, gate.running, gate.requests, gate.callers) == (0, 0, 0, 0)
    with pytest.raises(ServerStopping):
        await item(gate, "late", 0.0, log)
    assert log == ["r0", "r1"]


async def test_many_addresses_of_one_quota_are_one_share() -> None:
    """A local process can send from every loopback address (a host from every address of
    its /64): shared per address, eight of them would take eight turns to another
    caller's one."""
    gate, log = FairGate(1, "unit"), []
    many = [in_request(None, *(lambda k=k, a=a: item(gate, f"M{a}.{k}", 0.02, log)
                               for k in range(4)),
                       caller=Caller(f"127.0.0.{a}", quota_of(f"127.0.0.{a}")))
            for a in range(2, 10)]
    await asyncio.sleep(0.01)
    other = in_request(None, *(lambda k=k: item(gate, f"V{k}", 0.02, log) for k in range(4)),
                       caller=Caller("192.0.2.7", quota_of("192.0.2.7")))
    await asyncio.gather(other, *many)
    # one share against one: the other caller's four items alternate with the quota's
    assert log.index("V3") <= 9, log


async def test_a_resized_gate_lets_waiters_in_at_once_or_no_one_until_holders_are_done(
        ) -> None:
    """The sandbox's gate follows the engines that serve: more slots let waiters in at
    once; fewer cut no holder short and let no one in until enough are done."""
    gate = FairGate(2, "unit")
    release = asyncio.Event()
    entered: list[str] = []

    async def hold(tag: str) -> None:
        async with gate.slot():
            entered.append(tag)
            await release.wait()

    holders = [asyncio.ensure_future(hold(tag)) for tag in ("a", "b", "c", "d")]
    await asyncio.sleep(0.05)
    assert entered == ["a", "b"] and gate.waiting == 2
    gate.resize(3)
    assert gate.running == 3  # let in by the resize itself
    await asyncio.sleep(0.05)
    assert entered == ["a", "b", "c"]
    gate.resize(0)  # at least one
    assert gate.slots == 1 and gate.running == 3  # none cut short
    release.set()
    await asyncio.gather(*holders)
    assert entered == ["a", "b", "c", "d"] and (gate.running, gate.waiting) == (0, 0)
