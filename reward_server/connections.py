"""How many connections one server process keeps open, and whose go first when it is full.

Every connection holds a descriptor. A client may open connections faster than the head
deadline (``http_protocol``) closes them, or keep them busy (a head whose body never comes,
answers it never reads): a few thousand from one address took every descriptor the process
had, and then the server could open neither a sandbox's socket nor a file, nor accept
anyone else's connection. So a process keeps at most ``max_open`` connections (below its
descriptor limit, with room for its own work), and shares them max-min fair between
addresses: when a new connection comes past that, the address holding the most gives one
up: its oldest idle connection if it holds more than the newcomer's address, or, with none
idle, the one busy longest (the request on it sees its client gone) if it holds at least two
more. Otherwise the newcomer's address makes room from its own idle connections, or its new
connection is refused (a 503 with Retry-After). A caller with one request in flight
keeps it whatever another caller opens.

Addresses are grouped as ``callers.quota_of`` groups them (all of loopback is one, an IPv6
address by its /64): more addresses from one host buy no more room. Every event is O(1):
the addresses are kept in buckets by how many connections each holds.
"""

from __future__ import annotations

import resource
from collections.abc import Hashable
from typing import Protocol

from reward_server.callers import quota_of

# descriptors a process keeps for its own work (worker pipes, the Docker socket, sandbox
# sessions, files, the log) beyond its connections: at least this, or an eighth of its limit
RESERVED_DESCRIPTORS = 512


class Closable(Protocol):
    def evict(self) -> None: ...


def descriptor_limit() -> int:
    """The process's descriptor limit, raised to its hard limit first (a soft limit of
    1,024 is a common default that the hard limit allows past)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def default_max_open(limit: int | None = None) -> int:
    """Connections a process may keep open under a descriptor ``limit``."""
    limit = descriptor_limit() if limit is None else limit
    return max(16, limit - max(RESERVED_DESCRIPTORS, limit // 8))


class _Address:
    __slots__ = ("busy", "idle")

    def __init__(self) -> None:
        # in the order they became idle / busy: the oldest goes first
        self.idle: dict[Closable, None] = {}
        self.busy: dict[Closable, None] = {}

    @property
    def open(self) -> int:
        return len(self.idle) + len(self.busy)


class Connections:
    """The open connections of one process, by address (see the module docstring)."""

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, got {max_open}")
        self.max_open = max_open
        self.open = 0
        self.evicted = 0
        self.refused = 0
        self.lingering = 0  # refused connections whose answer is going out (not counted open)
        self._addresses: dict[Hashable, _Address] = {}
        self._of: dict[Closable, Hashable] = {}
        self._by_open: dict[int, dict[Hashable, None]] = {}  # connections held -> addresses
        self._most = 0

    def admit(self, connection: Closable, host: str | None) -> bool:
        """Room for a new ``connection`` from ``host`` (counted, idle): True; or False when
        the process is full and the newcomer's address must wait (the caller refuses it)."""
        key = quota_of(host) if host else None
        address = self._addresses.get(key)
        if self.open >= self.max_open and not self._make_room(key, address):
            self.refused += 1
            return False
        if address is None:
            address = self._addresses[key] = _Address()
        address.idle[connection] = None
        self._of[connection] = key
        self.open += 1
        self._moved(key, address.open - 1, address.open)
        return True

    def idle(self, connection: Closable) -> None:
        """No request of ``connection`` is being answered (it goes first for room)."""
        address = self._address_of(connection)
        if address is not None and connection in address.busy:
            del address.busy[connection]
            address.idle[connection] = None

    def busy(self, connection: Closable) -> None:
        """A request of ``connection`` is being answered."""
        address = self._address_of(connection)
        if address is not None and connection in address.idle:
            del address.idle[connection]
            address.busy[connection] = None

    def closed(self, connection: Closable) -> None:
        """``connection`` is gone: it no longer counts. Idempotent."""
        key = self._of.pop(connection, None)
        if key is None:
            return
        address = self._addresses[key]
        address.idle.pop(connection, None)
        address.busy.pop(connection, None)
        self.open -= 1
        self._moved(key, address.open + 1, address.open)
        if not address.open:
            del self._addresses[key]

    def holding(self, host: str | None) -> tuple[int, int]:
        """(idle, busy) connections of ``host``'s address."""
        address = self._addresses.get(quota_of(host) if host else None)
        return (len(address.idle), len(address.busy)) if address else (0, 0)

    def _address_of(self, connection: Closable) -> _Address | None:
        key = self._of.get(connection)
        return None if key is None else self._addresses[key]

    def _make_room(self, key: Hashable, own: _Address | None) -> bool:
        """One connection closed for a newcomer from ``key``, if fairness allows one: an
        idle one of an address holding more than the newcomer's, a busy one only of an
        address holding at least two more (or the move would just turn the unfairness
        round), else one of its own idle ones."""
        most = next(iter(self._by_open[self._most]))
        held = own.open if own else 0
        if most != key:
            victim = self._addresses[most]
            if victim.idle and self._most > held:
                return self._evict(next(iter(victim.idle)))
            if self._most > held + 1:
                return self._evict(next(iter(victim.busy)))
        if own is not None and own.idle:
            return self._evict(next(iter(own.idle)))
        return False

    def _evict(self, connection: Closable) -> bool:
        self.closed(connection)  # (counted gone now: ``evict`` frees its descriptor at once)
        self.evicted += 1
        connection.evict()
        return True

    def _moved(self, key: Hashable, before: int, after: int) -> None:
        if before:
            bucket = self._by_open[before]
            del bucket[key]
            if not bucket:
                del self._by_open[before]
        if after:
            self._by_open.setdefault(after, {})[key] = None
            self._most = max(self._most, after)
        while self._most and self._most not in self._by_open:
            self._most -= 1  # (counts move by one: at most one step per event)
