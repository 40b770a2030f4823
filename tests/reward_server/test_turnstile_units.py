"""The turnstile (reward_server/turnstile.py) with a stand-in app on a real event loop: how
many requests start per turn of the loop, in which callers' order, and what never waits."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from reward_server.quotas import Quotas
from reward_server.turnstile import Turnstile


def scope(address: str, path: str = "/v1/verify/math") -> dict[str, Any]:
    return {"type": "http", "path": path, "method": "POST", "client": (address, 1234)}


async def _run(requests: list[dict[str, Any]], per_turn: int) -> list[tuple[int, str, str]]:
    """Every request sent at once; (the loop turn it started in, its address, its path)."""
    turn = 0
    started: list[tuple[int, str, str]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        started.append((turn, scope["client"][0], scope["path"]))

    async def ticker() -> None:
        nonlocal turn
        while True:
            await asyncio.sleep(0)  # one step per turn of the loop
            turn += 1

    gate = Turnstile(app, per_turn=per_turn)
    tick = asyncio.ensure_future(ticker())
    await asyncio.gather(*(gate(s, None, None) for s in requests))
    tick.cancel()
    assert gate.waiting == 0
    return started


def test_at_most_per_turn_requests_start_in_a_turn_of_the_loop() -> None:
    started = asyncio.run(_run([scope("10.0.0.1")] * 50, per_turn=4))
    per_turn: dict[int, int] = {}
    for turn, _, _ in started:
        per_turn[turn] = per_turn.get(turn, 0) + 1
    assert len(started) == 50 and max(per_turn.values()) <= 4
    assert len(per_turn) >= 50 // 4


def test_callers_take_turns_whatever_one_has_queued() -> None:
    """A's 200 requests came first; B's one starts within a round of the callers, not after
    A's 200 (first come, first served on the loop, it did)."""
    started = asyncio.run(_run([scope("10.0.0.1")] * 200 + [scope("10.0.0.2")], per_turn=4))
    order = [address for _, address, _ in started]
    assert order.index("10.0.0.2") <= 4 + 2


def test_health_and_metrics_never_wait() -> None:
    requests = [scope("10.0.0.1")] * 100 + [scope("10.0.0.3", "/healthz"),
                                           scope("10.0.0.3", "/metrics")]
    started = asyncio.run(_run(requests, per_turn=2))
    first_turn = min(turn for turn, _, _ in started)
    assert {path for turn, _, path in started if turn == first_turn} >= {"/healthz", "/metrics"}


def test_a_request_cancelled_while_parked_is_skipped() -> None:
    async def scenario() -> list[str]:
        started: list[str] = []

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            started.append(scope["client"][0])

        gate = Turnstile(app, per_turn=1)
        first = asyncio.ensure_future(gate(scope("10.0.0.1"), None, None))
        parked = asyncio.ensure_future(gate(scope("10.0.0.2"), None, None))
        last = asyncio.ensure_future(gate(scope("10.0.0.3"), None, None))
        await asyncio.sleep(0)
        parked.cancel()
        await asyncio.gather(first, last, parked, return_exceptions=True)
        assert gate.waiting == 0
        return started

    assert asyncio.run(scenario()) == ["10.0.0.1", "10.0.0.3"]


def test_a_caller_parks_no_more_requests_than_its_cap_allows() -> None:
    """With a cap of 3 requests per caller, A's ten at once: one starts, three wait their
    turn, the other six are answered 429 with Retry-After at once (parked, each would have
    held the server's memory until its turn). B's one still waits and starts."""
    app_state = SimpleNamespace(state=SimpleNamespace(scorer=SimpleNamespace(
        quotas=Quotas(requests_per_caller=3, items_per_caller=0, items_in_flight=0))))

    async def scenario() -> tuple[list[str], list[dict[str, Any]]]:
        started: list[str] = []
        answers: list[dict[str, Any]] = []

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            started.append(scope["client"][0])

        async def send(message: dict[str, Any]) -> None:
            answers.append(message)

        gate = Turnstile(app, per_turn=1)
        requests = [scope("10.0.0.1") for _ in range(10)] + [scope("10.0.0.2")]
        for request in requests:
            request["app"] = app_state
        await asyncio.gather(*(gate(r, None, send) for r in requests))
        assert gate.waiting == 0
        return started, answers

    started, answers = asyncio.run(scenario())
    assert started.count("10.0.0.1") == 4 and started.count("10.0.0.2") == 1
    refusals = [m for m in answers if m["type"] == "http.response.start"]
    assert len(refusals) == 6 and {m["status"] for m in refusals} == {429}
    assert all(int(dict(m["headers"])[b"retry-after"]) >= 1 for m in refusals)
