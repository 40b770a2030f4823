"""The count of a process's connections (reward_server/connections.py) as a pure structure:
who is closed for room when it is full, who never is, and that its O(1) bookkeeping agrees
with a plain recount after any sequence of events."""

from __future__ import annotations

import random

import pytest

from reward_server.connections import Connections, default_max_open


class Conn:
    def __init__(self, host: str) -> None:
        self.host = host
        self.evicted = False

    def evict(self) -> None:
        self.evicted = True


def test_a_full_process_takes_room_from_the_address_holding_the_most() -> None:
    """Its oldest idle connection first; the others' connections are not touched."""
    ledger = Connections(max_open=6)
    flood = [Conn("10.0.0.9") for _ in range(4)]
    honest = [Conn("10.0.0.1"), Conn("10.0.0.2")]
    for conn in [*flood, *honest]:
        assert ledger.admit(conn, conn.host)
    ledger.busy(flood[0])  # (the oldest idle one is then flood[1])
    newcomer = Conn("10.0.0.3")
    assert ledger.admit(newcomer, newcomer.host)
    assert [c.evicted for c in flood] == [False, True, False, False]
    assert not any(c.evicted for c in honest) and ledger.open == 6
    assert ledger.holding("10.0.0.9") == (2, 1) and ledger.evicted == 1


def test_with_nothing_idle_the_one_busy_longest_goes() -> None:
    """Busy connections (a head whose body never comes, an answer never read) are no
    shelter: the address holding the most gives up the one busy longest."""
    ledger = Connections(max_open=4)
    flood = [Conn("10.0.0.9") for _ in range(3)]
    honest = Conn("10.0.0.1")
    for conn in [*flood, honest]:
        ledger.admit(conn, conn.host)
        ledger.busy(conn)
    assert ledger.admit(Conn("10.0.0.2"), "10.0.0.2")
    assert [c.evicted for c in flood] == [True, False, False] and not honest.evicted


def test_an_address_holding_as_many_as_any_waits_or_uses_its_own_idle_ones() -> None:
    ledger = Connections(max_open=4)
    a = [Conn("10.0.0.1") for _ in range(2)]
    b = [Conn("10.0.0.2") for _ in range(2)]
    for conn in [*a, *b]:
        ledger.admit(conn, conn.host)
        ledger.busy(conn)
    # 10.0.0.1 holds 2, as many as any: taking 10.0.0.2's would only move the unfairness
    assert not ledger.admit(Conn("10.0.0.1"), "10.0.0.1") and ledger.refused == 1
    ledger.idle(a[1])
    again = Conn("10.0.0.1")
    assert ledger.admit(again, "10.0.0.1") and a[1].evicted  # its own idle one
    assert not any(c.evicted for c in b) and ledger.holding("10.0.0.1") == (1, 1)
    # one from a third address: 10.0.0.1 and .2 hold 2, it holds 0: room from one of them
    assert ledger.admit(Conn("10.0.0.3"), "10.0.0.3") and ledger.evicted == 2


def test_addresses_are_grouped_as_callers_are() -> None:
    """Any address of 127/8 is one: a host cannot buy room with more loopback addresses."""
    ledger = Connections(max_open=100)
    for k in range(1, 5):
        ledger.admit(Conn(f"127.0.0.{k}"), f"127.0.0.{k}")
    assert ledger.holding("127.0.0.1") == (4, 0)


def test_the_bookkeeping_agrees_with_a_recount_after_any_events() -> None:
    rng = random.Random(7)
    ledger = Connections(max_open=40)
    live: list[Conn] = []
    for _ in range(5000):
        op = rng.random()
        if op < 0.4:
            conn = Conn(f"10.0.0.{rng.randrange(6)}")
            if ledger.admit(conn, conn.host):
                live.append(conn)
            live = [c for c in live if not c.evicted]
        elif live and op < 0.6:
            ledger.busy(rng.choice(live))
        elif live and op < 0.8:
            ledger.idle(rng.choice(live))
        elif live:
            conn = live.pop(rng.randrange(len(live)))
            ledger.closed(conn)
            ledger.closed(conn)  # (twice: a close is idempotent)
        held: dict[str, int] = {}
        for conn in live:
            held[conn.host] = held.get(conn.host, 0) + 1
        assert ledger.open == len(live) <= 40
        assert {k: a.open for k, a in ledger._addresses.items()} == held
        assert ledger._most == max([0, *held.values()])
        for count, keys in ledger._by_open.items():
            assert all(held[k] == count for k in keys)


def test_the_default_leaves_descriptors_for_the_servers_own_work() -> None:
    assert default_max_open(20_000) == 17_500
    assert default_max_open(1024) == 512
    assert default_max_open(100) == 16
    with pytest.raises(ValueError):
        Connections(0)
