"""How many connections one server process keeps open, and whose go first when it is full.

Every connection holds a descriptor. Before a connection sends a whole request head it
costs the server nothing else, and a client may open them faster than the head deadline
(``http_protocol``) closes them: a few thousand idle connections from one address took
every descriptor the process had, and then the server could open neither a sandbox's
socket nor a file, nor accept anyone else's connection. So a process keeps at most
``max_open`` connections (below its descriptor limit, with room for its own work), and
when a new one comes past that, the *idle* connection (no request of it being answered)
held longest by the address with the most idle connections is closed to make room: a
caller holding thousands of idle connections loses them one by one, a caller with one
request in flight loses nothing. Only when no connection is idle is the new one refused
(a 503 with Retry-After). Connections with a request being answered are bounded by the
callers' caps (``quotas``), not here.

Addresses are grouped as ``callers.quota_of`` groups them (all of loopback is one, an IPv6
address by its /64): more addresses from one host buy no more room. Every event is O(1):
the addresses are kept in buckets by how many idle connections each holds.
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
    __slots__ = ("idle", "open")

    def __init__(self) -> None:
        self.open = 0
        self.idle: dict[Closable, None] = {}  # in the order they became idle


class Connections:
    """The open connections of one process, by address (see the module docstring)."""

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"max_open must be at least 1, got {max_open}")
        self.max_open = max_open
        self.open = 0
        self.evicted = 0
        self.refused = 0
        self._addresses: dict[Hashable, _Address] = {}
        self._of: dict[Closable, Hashable] = {}
        self._by_idle: dict[int, dict[Hashable, None]] = {}  # idle count -> addresses
        self._most_idle = 0

    def admit(self, connection: Closable, host: str | None) -> bool:
        """Room for a new ``connection`` from ``host`` (counted, idle): True; or False when
        the process is full and no connection is idle (the caller refuses it)."""
        if self.open >= self.max_open:
            if not self._most_idle:
                self.refused += 1
                return False
            self._evict_one()
        key = quota_of(host) if host else None
        address = self._addresses.get(key)
        if address is None:
            address = self._addresses[key] = _Address()
        address.open += 1
        self.open += 1
        self._of[connection] = key
        self.idle(connection)
        return True

    def idle(self, connection: Closable) -> None:
        """No request of ``connection`` is being answered (it may be closed for room)."""
        key = self._of.get(connection)
        if key is None:
            return
        address = self._addresses[key]
        if connection not in address.idle:
            address.idle[connection] = None
            self._moved(key, len(address.idle) - 1, len(address.idle))

    def busy(self, connection: Closable) -> None:
        """A request of ``connection`` is being answered (it is not closed for room)."""
        key = self._of.get(connection)
        if key is None:
            return
        address = self._addresses[key]
        if connection in address.idle:
            del address.idle[connection]
            self._moved(key, len(address.idle) + 1, len(address.idle))

    def closed(self, connection: Closable) -> None:
        """``connection`` is gone (or going): it no longer counts. Idempotent."""
        self.busy(connection)
        key = self._of.pop(connection, None)
        if key is None:
            return
        address = self._addresses[key]
        address.open -= 1
        self.open -= 1
        if not address.open:
            del self._addresses[key]

    def idle_of(self, host: str | None) -> int:
        """Idle connections of ``host``'s address (for tests and metrics)."""
        address = self._addresses.get(quota_of(host) if host else None)
        return len(address.idle) if address else 0

    def _evict_one(self) -> None:
        key = next(iter(self._by_idle[self._most_idle]))
        connection = next(iter(self._addresses[key].idle))
        self.closed(connection)
        self.evicted += 1
        connection.evict()

    def _moved(self, key: Hashable, before: int, after: int) -> None:
        if before:
            bucket = self._by_idle[before]
            del bucket[key]
            if not bucket:
                del self._by_idle[before]
        if after:
            self._by_idle.setdefault(after, {})[key] = None
            self._most_idle = max(self._most_idle, after)
        while self._most_idle and self._most_idle not in self._by_idle:
            self._most_idle -= 1  # (counts move by one: at most one step per event)
