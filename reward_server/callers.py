"""Who sent a request: its **caller**, to whom a session belongs, and its **quota**, what
the caps count by and between which the fair gates and the turnstile share the workers.

With tokens configured (``api_token``, ``api_tokens_file``), a caller is the *name* of the
token it presented (``BearerAuth`` finds it): each team with a token of its own is a caller
of its own from whatever addresses it comes, and one team is one caller from any number of
them. The name, never the token, is what logs and metrics may show.

Without tokens, a caller is the client's address (behind a proxy trusted by
``forwarded_allow_ips``, its ``X-Forwarded-For``). An address is no credential: every local
process can use any address of 127/8, and a host given an IPv6 /64 (SLAAC, privacy
addresses) can use any address in it. So a quota is the unit a client can take without
anyone's leave: all loopback addresses are one quota, an IPv6 address counts as its /64, an
IPv4 address as itself (another one needs the network's say).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import re
import secrets
import stat
from collections.abc import Hashable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reward_server.server_settings import ServerSettings

log = logging.getLogger("reward_server")

SCOPE_KEY = "reward_server.caller"  # the ASGI scope entry BearerAuth sets: the token's name
RESOLVED_KEY = "reward_server.caller_of"  # the Caller found from it (caller_of_scope)
DEFAULT_NAME = "default"  # the caller of ``api_token`` (the flag or REWARD_SERVER_API_TOKEN)
NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
LOOPBACK = "loopback"


@dataclass(frozen=True)
class Caller:
    name: str  # the token's name, or the client's address
    quota: str  # what caps and fair shares count by (see the module docstring)

    def __str__(self) -> str:
        return self.name


def quota_key(caller: Hashable) -> Hashable:
    """What per-caller caps and fair shares count by: a ``Caller``'s quota, else the key
    itself (an in-process caller's name; None, the anonymous one)."""
    return caller.quota if isinstance(caller, Caller) else caller


@functools.lru_cache(maxsize=65536)  # parsing an address cost ~20 us of every request
def quota_of(address: str) -> str:
    """The quota of a client address: 'loopback', an IPv6 /64, an IPv4 address; anything
    that is no IP address (a Ray handle's name, 'unknown') is its own."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return LOOPBACK
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def caller_of_scope(scope: MutableMapping[str, Any]) -> Caller:
    """The request's caller, found once and kept in its scope: the turnstile and the route
    both ask, and an address is parsed to find its quota."""
    found = scope.get(RESOLVED_KEY)
    if found is None:
        found = scope[RESOLVED_KEY] = _caller_of(scope)
    return found


def _caller_of(scope: Mapping[str, Any]) -> Caller:
    name = scope.get(SCOPE_KEY)
    if name is not None:
        return Caller(name, f"token:{name}")
    client = scope.get("client")
    address = client[0] if client else "unknown"
    return Caller(address, quota_of(address))


class Tokens:
    """The configured tokens by name; ``identify`` compares a presented one with every
    token in constant time (its time depends on how many there are, not on which matched
    or how much of one did)."""

    def __init__(self, by_name: Mapping[str, str]) -> None:
        self._tokens = [(name, token.encode()) for name, token in by_name.items()]

    def __bool__(self) -> bool:
        return bool(self._tokens)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._tokens]

    def first(self) -> str | None:
        """One token (an in-process client's: the Ray handle)."""
        return self._tokens[0][1].decode() if self._tokens else None

    def identify(self, presented: bytes) -> str | None:
        found = None
        for name, token in self._tokens:
            if secrets.compare_digest(presented, token) and found is None:
                found = name
        return found


def load_tokens(settings: ServerSettings) -> Tokens:
    """``api_token`` (named 'default') and each ``name:token`` line of ``api_tokens_file``;
    ValueError naming the file and line (never the token) when one is malformed or repeated.
    A file without a token is an error, not a server open to everyone."""
    tokens: dict[str, str] = {}
    if settings.api_token is not None:
        tokens[DEFAULT_NAME] = settings.api_token.get_secret_value()
    path = settings.api_tokens_file
    if path is None:
        return Tokens(tokens)
    try:
        text = Path(path).read_text()
        mode = Path(path).stat().st_mode
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"api_tokens_file {path}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("api_tokens_file %s can be read by others than its owner (chmod 600)", path)
    from_file = 0
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, token = (part.strip() for part in line.partition(":"))
        where = f"api_tokens_file {path}, line {number}"
        if not colon or not NAME.fullmatch(name) or not token:
            raise ValueError(f"{where}: not 'name:token' (a name of letters, digits, '.', "
                             "'_', '-'; a token after the colon)")
        if name in tokens:
            raise ValueError(f"{where}: the name {name!r} is given twice"
                             + (" (api_token is 'default')" if name == DEFAULT_NAME else ""))
        if token in tokens.values():
            raise ValueError(f"{where}: its token is another name's too")
        tokens[name] = token
        from_file += 1
    if not from_file:
        raise ValueError(f"api_tokens_file {path} holds no 'name:token' line")
    return Tokens(tokens)
