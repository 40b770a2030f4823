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


def test_a_full_process_closes_the_oldest_idle_connection_of_the_address_with_most() -> None:
    ledger = Connections(max_open=6)
    flood = [Conn("10.0.0.9") for _ in range(4)]
    honest = [Conn("10.0.0.1"), Conn("10.0.0.2")]
    for conn in [*flood, *honest]:
        assert ledger.admit(conn, conn.host)
    newcomer = Conn("10.0.0.3")
    assert ledger.admit(newcomer, newcomer.host)
    assert [c.evicted for c in flood] == [True, False, False, False]  # its oldest first
    assert not any(c.evicted for c in honest) and ledger.open == 6
    assert ledger.idle_of("10.0.0.9") == 3 and ledger.evicted == 1


def test_a_connection_being_answered_is_never_closed_for_room() -> None:
    ledger = Connections(max_open=3)
    busy = [Conn("10.0.0.9") for _ in range(2)]
    idle = Conn("10.0.0.1")
    for conn in [*busy, idle]:
        ledger.admit(conn, conn.host)
    for conn in busy:
        ledger.busy(conn)
    assert ledger.admit(Conn("10.0.0.2"), "10.0.0.2")  # the only idle one went
    assert idle.evicted and not any(c.evicted for c in busy)
    for conn in list(ledger._of):
        ledger.busy(conn)
    late = Conn("10.0.0.3")
    assert not ledger.admit(late, late.host) and ledger.refused == 1
    ledger.idle(busy[0])  # its answer went out: it may go for the next
    assert ledger.admit(late, late.host) and busy[0].evicted


def test_addresses_are_grouped_as_callers_are() -> None:
    """Any address of 127/8 is one: a host cannot buy room with more loopback addresses."""
    ledger = Connections(max_open=100)
    for k in range(1, 5):
        ledger.admit(Conn(f"127.0.0.{k}"), f"127.0.0.{k}")
    assert ledger.idle_of("127.0.0.1") == 4


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
        idle = {a.host: 0 for a in live}
        for key, address in ledger._addresses.items():
            idle[key] = len(address.idle)
        assert ledger.open == len(live) <= 40
        assert ledger._most_idle == max([0, *idle.values()])
        for count, keys in ledger._by_idle.items():
            assert all(len(ledger._addresses[k].idle) == count for k in keys)


def test_the_default_leaves_descriptors_for_the_servers_own_work() -> None:
    assert default_max_open(20_000) == 17_500
    assert default_max_open(1024) == 512
    assert default_max_open(100) == 16
    with pytest.raises(ValueError):
        Connections(0)
