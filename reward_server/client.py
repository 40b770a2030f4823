"""Python client for the reward server, for our trainer and for users' own training loops.

Needs only httpx and tenacity (no server dependencies). A batch is split into chunks of at
most ``batch_size`` items, and spread over every server URL given (a chunk per server at
least), sent concurrently. Connect errors, timeouts, 429 and 5xx are retried: a chunk whose
server failed moves at once to another server (the failed one is set aside for
``cooldown_s``); when every server has failed, it waits with exponential backoff and jitter.
A 429 or 503 that says ``Retry-After`` (the server's caps on what a caller has in flight,
its queue's drain rate behind the figure) is honoured: that server is set aside that long,
and a chunk with nowhere else to go waits that long times 1 to 1.5 (jitter, so the many
clients told the same second do not all come back in it).
Any other 4xx is the caller's mistake and raised at once with the server's message. An item
the server cannot take (a missing field, a test in a shape its verifier does not accept)
comes back as a result of its own, status ``invalid_item`` and reward None, so it costs no
other item its reward; ``on_invalid="error"`` makes it a ``RewardRequestError`` instead. A chunk
lands in the result exactly once, at its own positions, whichever server answered it, so a
retried chunk is never counted twice. A chunk whose body is over the server's limit (413) is
halved until each half fits. After ``max_attempts`` tries (or ``retry_for_s``
seconds) the call raises ``RewardServerUnavailable``: a failed call is never silently a
reward of 0.

    with RewardClient(["http://10.0.0.1:8000", "http://10.0.0.2:8000"]) as client:
        out = client.rewards([{"verifier": "math", "response": r, "answer": "42"}])
        out.rewards   # [1.0]
"""

from __future__ import annotations

import asyncio
import itertools
import json as jsonlib
import math
import re
import socket
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    stop_never,
    stop_when_event_set,
    wait_exponential,
    wait_random,
)

from reward_server.retry_after import jittered, retry_after_s
from reward_server.statuses import REFUSALS

__all__ = [
    "AsyncRewardClient",
    "Endpoints",
    "RewardClient",
    "RewardClientError",
    "RewardRequestError",
    "RewardServerUnavailable",
    "Rewards",
    "Verified",
    "merge",
    "merge_verified",
    "split_urls",
]


class RewardClientError(Exception):
    """Base of the client's errors."""


class RewardRequestError(RewardClientError):
    """The server refused the request (4xx other than 429): retrying will not help."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(f"HTTP {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


class RewardServerUnavailable(RewardClientError):
    """No answer after every attempt (connection refused, timeouts, 429, 5xx)."""


# the statuses of an item the server refused (reward_server/admission.py; the client does not
# import the server)


class _Retryable(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}: {response.text[:200]}")
        self.retry_after_s = retry_after_s(response)


@dataclass(frozen=True)
class Rewards:
    rewards: list[float | None]
    results: list[dict[str, Any]]
    # What produced the results, a block per verifier (reward_server/provenance.py). When
    # the servers that answered a batch's chunks disagree (a rolling upgrade), that
    # verifier's results each carry their own block as ``result["provenance"]`` instead
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)

    def provenance_of(self, index: int) -> dict[str, Any] | None:
        """What produced result ``index``: its own block, or its verifier's (None for an
        item of no verifier the server knows)."""
        result = self.results[index]
        return result.get("provenance") or self.provenance.get(result.get("verifier", ""))


class Verified(list[dict[str, Any]]):
    """``verify``'s results: the list of result dicts it always returned, and what produced
    them, as ``Rewards`` has it for ``rewards``."""

    def __init__(self, verifier: str, results: Sequence[dict[str, Any]] = (),
                 provenance: dict[str, dict[str, Any]] | None = None) -> None:
        super().__init__(results)
        self.verifier = verifier
        # The verifier's block by its name (as ``Rewards.provenance``); empty where the
        # servers that answered the chunks disagree (each result then carries its own)
        self.provenance = provenance or {}

    def provenance_of(self, index: int) -> dict[str, Any] | None:
        """What produced result ``index``: its own block, or the verifier's."""
        return self[index].get("provenance") or self.provenance.get(self.verifier)


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, _Retryable | httpx.TransportError)


def _check(response: httpx.Response) -> Any:
    if response.status_code == 429 or response.status_code >= 500:
        raise _Retryable(response)
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise RewardRequestError(response.status_code, str(detail))
    return response.json()


def _chunks(items: Sequence[Any], size: int, servers: int) -> Iterator[Sequence[Any]]:
    """At most ``size`` items a chunk, and at least one chunk per server when there are
    items enough, so that one batch is spread over every server."""
    size = max(1, min(size, math.ceil(len(items) / servers)))
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _at(offset: int, text: str) -> str:
    """A chunk's ``items[k]`` as the caller's position of that item."""
    return re.sub(r"items\[(\d+)\]", lambda m: f"items[{int(m[1]) + offset}]", text)


def _placed(offset: int, part: dict[str, Any]) -> dict[str, Any]:
    """A chunk's answer whose refusals name the caller's positions, not the chunk's."""
    if offset:
        for result in part["results"]:
            if isinstance(result.get("detail"), str) and result.get("status") in REFUSALS:
                result["detail"] = _at(offset, result["detail"])
    return part


def _body(payload: Any) -> dict[str, Any]:
    """The request's body as ASCII JSON: httpx writes its ``json=`` as UTF-8, which a lone
    surrogate in a completion (a model can emit one) cannot be encoded to, and the whole
    call failed; escaped, the server reads it and scores that item."""
    if payload is None:
        return {}
    return {"content": jsonlib.dumps(payload).encode("ascii"),
            "headers": {"content-type": "application/json"}}


def _blocks(part: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A part's provenance by verifier (``/v1/verify/<name>`` answers with one block)."""
    given = part.get("provenance") or {}
    return {given["verifier"]: given} if "fingerprint" in given else given


def _verifier_of(result: dict[str, Any], blocks: dict[str, dict[str, Any]]) -> str | None:
    """The verifier of a result: named in it (``/v1/rewards``), or its answer's only one
    (``/v1/verify/<name>``, whose results do not name it)."""
    if "verifier" in result:
        return result["verifier"]
    return next(iter(blocks)) if len(blocks) == 1 else None


def _provenance(parts: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The parts' provenance blocks as one: a verifier whose blocks differ between parts
    (servers of two versions answered) has none there, its results each their own."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for part in parts:
        for name, block in _blocks(part).items():
            if block not in seen.setdefault(name, []):
                seen[name].append(block)
    split = {name for name, blocks in seen.items() if len(blocks) > 1}
    for part in parts if split else ():
        blocks = _blocks(part)
        for result in part["results"]:
            name = _verifier_of(result, blocks)
            if name is not None and name in split and "provenance" not in result:
                result["provenance"] = blocks.get(name)
    return {name: blocks[0] for name, blocks in seen.items() if name not in split}


def _joined(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two halves' answers as one chunk's."""
    joined = {key: first[key] + second[key] for key in first if isinstance(first[key], list)}
    return {**joined, "provenance": _provenance([first, second])}


def merge(parts: Sequence[dict[str, Any]]) -> Rewards:
    """The answers to a batch's chunks, in order, as one (the Ray handle's too)."""
    return Rewards(
        rewards=[r for part in parts for r in part["rewards"]],
        results=[r for part in parts for r in part["results"]],
        provenance=_provenance(parts),
    )


def merge_verified(verifier: str, parts: Sequence[dict[str, Any]]) -> Verified:
    """The answers to a ``verify`` batch's chunks, in order, as one (the Ray handle's too)."""
    return Verified(verifier, [r for part in parts for r in part["results"]],
                    _provenance(parts))


def _offsets(chunks: list[list[Any]]) -> Iterator[tuple[int, list[Any]]]:
    """Each chunk with the caller's position of its first item."""
    offset = 0
    for chunk in chunks:
        yield offset, chunk
        offset += len(chunk)


def split_urls(text: str) -> list[str]:
    """``"http://a:8000, http://b:8000"`` (a flag, an environment variable) → two URLs."""
    return [u.strip() for u in text.split(",") if u.strip()]


class Endpoints:
    """The reward servers a client talks to, handed out round-robin. A server that just
    failed is set aside for ``cooldown_s``: its chunks fail over to the others at once."""

    def __init__(self, urls: str | Sequence[str], cooldown_s: float = 5.0) -> None:
        urls = [urls] if isinstance(urls, str) else list(urls)
        if not urls:
            raise ValueError("give at least one reward server URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.cooldown_s = cooldown_s
        self._down_until = dict.fromkeys(self.urls, 0.0)
        self._turn = itertools.cycle(range(len(self.urls)))
        self._lock = threading.Lock()

    def pick(self, tried: set[str]) -> str:
        """The next server up that this chunk has not tried in this round; when there is
        none, the next one in turn (the caller has waited its backoff by then)."""
        with self._lock:
            now = time.monotonic()
            start = next(self._turn)
            order = [self.urls[(start + k) % len(self.urls)] for k in range(len(self.urls))]
            for url in order:
                if url not in tried and self._down_until[url] <= now:
                    return url
            for url in order:
                if url not in tried:
                    return url
            return order[0]

    def untried_up(self, tried: set[str]) -> bool:
        now = time.monotonic()
        with self._lock:
            return any(u not in tried and self._down_until[u] <= now for u in self.urls)

    def failed(self, url: str, for_s: float | None = None) -> None:
        """Set ``url`` aside for ``cooldown_s``, or ``for_s`` (its Retry-After) when longer."""
        with self._lock:
            self._down_until[url] = time.monotonic() + max(self.cooldown_s, for_s or 0.0)

    def succeeded(self, url: str) -> None:
        with self._lock:
            self._down_until[url] = 0.0


class _Route:
    """One chunk's way through the servers: which it tried since it last waited."""

    def __init__(self, endpoints: Endpoints, backoff: Any) -> None:
        self.endpoints, self.backoff = endpoints, backoff
        self.tried: set[str] = set()

    @contextmanager
    def next_server(self) -> Iterator[str]:
        """The server for this try; a retryable failure inside sets it aside."""
        url = self.endpoints.pick(self.tried)
        self.tried.add(url)
        try:
            yield url
        except _Retryable as exc:
            self.endpoints.failed(url, exc.retry_after_s)
            raise
        except httpx.TransportError:
            self.endpoints.failed(url)
            raise
        self.endpoints.succeeded(url)

    def wait(self, state: RetryCallState) -> float:
        """No wait while another server is up and untried; else the server's Retry-After
        with jitter when it gave one, or back off; then a new round."""
        if self.endpoints.untried_up(self.tried):
            return 0.0
        self.tried.clear()
        exc = state.outcome.exception() if state.outcome is not None else None
        told = exc.retry_after_s if isinstance(exc, _Retryable) else None
        if told is not None:
            return jittered(told)
        return float(self.backoff(state))


class _Options:
    def __init__(self, base_url: str | Sequence[str], token: str | None, timeout: float,
                 batch_size: int, max_attempts: int | None, retry_for_s: float | None,
                 backoff_s: float, max_backoff_s: float, cooldown_s: float,
                 on_invalid: str) -> None:
        if on_invalid not in ("null", "error"):
            raise ValueError(f"on_invalid is 'null' or 'error', not {on_invalid!r}")
        self.query = "?on_invalid=error" if on_invalid == "error" else ""
        if batch_size < 1 or (max_attempts is not None and max_attempts < 1):
            raise ValueError("batch_size and max_attempts must be at least 1")
        self.endpoints = Endpoints(base_url, cooldown_s)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self.batch_size = batch_size
        self.backoff = (wait_exponential(multiplier=backoff_s, max=max_backoff_s)
                        + wait_random(0, backoff_s))
        if max_attempts is None and retry_for_s is None:
            raise ValueError("give max_attempts or retry_for_s (or both): retrying forever "
                             "would hide a dead server")
        stop = stop_after_attempt(max_attempts) if max_attempts is not None else stop_never
        limits = [f"{max_attempts} attempts"] if max_attempts is not None else []
        if retry_for_s is not None:
            stop = stop | stop_after_delay(retry_for_s)
            limits.append(f"{retry_for_s:g} s")
        self.stop = stop
        self.limits = " or ".join(limits)

    def chunks(self, items: Sequence[Any]) -> list[list[Any]]:
        return [list(c) for c in _chunks(items, self.batch_size,
                                         len(self.endpoints.urls))]

    def route(self) -> _Route:
        return _Route(self.endpoints, self.backoff)

    def retry_kwargs(self, route: _Route) -> dict[str, Any]:
        return dict(retry=retry_if_exception(_is_retryable), stop=self.stop,
                    wait=route.wait, reraise=True)

    def unavailable(self, path: str, exc: BaseException) -> RewardServerUnavailable:
        where = ", ".join(self.endpoints.urls)
        return RewardServerUnavailable(
            f"reward server at {where} failed {path} after {self.limits}: "
            f"{type(exc).__name__}: {exc}"
        )


_CLIENT_ARGS = """
    ``base_url``: one server URL or several (the batch is spread over them, with failover).
    ``max_attempts``/``retry_for_s``: give up after that many tries of a chunk, or after
    that long, whichever comes first (None: no limit of that kind).
    ``on_invalid``: an item the server cannot take gets reward None and status
    ``invalid_item`` ("null"), or refuses the call with ``RewardRequestError`` ("error").
"""


class _Sockets(httpcore.NetworkBackend):
    """httpcore's network backend, keeping the socket of each connection it opens (and of
    the TLS layered on one) so that ``shut`` can end the requests on them: closing a socket
    leaves a thread blocked reading it waiting until the server answers (httpx's ``close``
    does just that), shutting it down ends the read at once."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._shut = False

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _KeptStream(self._backend.connect_tcp(*args, **kwargs), self)

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _KeptStream(self._backend.connect_unix_socket(*args, **kwargs), self)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)

    def keep(self, stream: httpcore.NetworkStream) -> None:
        sock = stream.get_extra_info("socket")
        if sock is None:
            return
        with self._lock:
            self._sockets.add(sock)
            shut = self._shut
        if shut:  # opened as the client was shut: ended too
            _shut_down(sock)

    def shut(self) -> None:
        with self._lock:
            self._shut = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut_down(sock)


class _KeptStream(httpcore.NetworkStream):
    """A connection whose socket its ``_Sockets`` keeps, TLS or not."""

    def __init__(self, stream: httpcore.NetworkStream, sockets: _Sockets) -> None:
        self._stream, self._sockets = stream, sockets
        sockets.keep(stream)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, timeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _KeptStream(self._stream.start_tls(*args, **kwargs), self._sockets)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


def _shut_down(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # closed already, or never connected
        pass


class RewardClient:
    """Blocking client; one connection pool, reused across calls; a batch's chunks go out
    concurrently on at most ``max_concurrency`` threads.""" + _CLIENT_ARGS

    def __init__(self, base_url: str | Sequence[str], *, token: str | None = None,
                 timeout: float = 120.0, batch_size: int = 512,
                 max_attempts: int | None = 5, retry_for_s: float | None = None,
                 backoff_s: float = 0.5, max_backoff_s: float = 10.0, cooldown_s: float = 5.0,
                 max_concurrency: int = 8, transport: httpx.BaseTransport | None = None,
                 on_invalid: str = "null") -> None:
        self._o = _Options(base_url, token, timeout, batch_size, max_attempts, retry_for_s,
                           backoff_s, max_backoff_s, cooldown_s, on_invalid)
        self._sockets: _Sockets | None = None
        if transport is None:  # httpx's own, its sockets kept for ``abort``
            transport = httpx.HTTPTransport()
            # httpx's pool and httpcore's backend are private: an httpx laid out otherwise
            # still gets a client, whose ``abort`` then stops retries but not a read in hand
            pool = getattr(transport, "_pool", None)
            backend = getattr(pool, "_network_backend", None)
            if isinstance(backend, httpcore.NetworkBackend):
                self._sockets = _Sockets(backend)
                pool._network_backend = self._sockets  # type: ignore[union-attr]
        self._http = httpx.Client(headers=self._o.headers, timeout=self._o.timeout,
                                  transport=transport)
        self._threads = ThreadPoolExecutor(max_concurrency, thread_name_prefix="reward-client")
        self._aborted = threading.Event()

    @property
    def urls(self) -> list[str]:
        return self._o.endpoints.urls

    def _request(self, method: str, path: str, json: Any = None) -> Any:
        route = self._o.route()
        kwargs = self._o.retry_kwargs(route)
        # aborted: no try after the one in hand, and no backoff waited out before it
        kwargs.update(stop=kwargs["stop"] | stop_when_event_set(self._aborted),
                      sleep=self._aborted.wait)
        try:
            for attempt in Retrying(**kwargs):
                with attempt, route.next_server() as url:
                    return _check(self._http.request(method, url + path, **_body(json)))
        except (_Retryable, httpx.TransportError) as exc:
            raise self._o.unavailable(path, exc) from exc

    def _post(self, path: str, offset: int, chunk: list[Any]) -> dict[str, Any]:
        try:
            return _placed(offset, self._request("POST", path, {"items": chunk}))
        except RewardRequestError as exc:
            if exc.status_code == 413 and len(chunk) > 1:  # a body over the server's limit
                half = len(chunk) // 2
                return _joined(self._post(path, offset, chunk[:half]),
                               self._post(path, offset + half, chunk[half:]))
            raise RewardRequestError(exc.status_code, _at(offset, exc.detail)) from None

    def _scatter(self, path: str, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        chunks = self._o.chunks(items)
        if len(chunks) == 1:
            return [self._post(path, 0, chunks[0])]
        futures = [self._threads.submit(self._post, path, offset, chunk)
                   for offset, chunk in _offsets(chunks)]
        return [f.result() for f in futures]

    def rewards(self, items: Sequence[dict[str, Any]]) -> Rewards:
        """Score a mixed batch; each item names its ``verifier``."""
        return merge(self._scatter("/v1/rewards" + self._o.query, items))

    def verify(self, verifier: str, items: Sequence[dict[str, Any]]) -> Verified:
        """Score a batch with one verifier: its results, a list, with ``provenance``."""
        return merge_verified(verifier, self._scatter(
            f"/v1/verify/{verifier}{self._o.query}", items))

    def verifiers(self) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/verifiers")["verifiers"]

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/healthz")

    def close(self) -> None:
        self._threads.shutdown(wait=True, cancel_futures=True)
        self._http.close()

    def abort(self) -> None:
        """Ends what is in flight now, for a caller that is stopping (Ctrl-C): a request
        waiting for its server fails at once (its connection shut down) rather than when
        the server answers or ``timeout`` passes, none is tried again, chunks not yet sent
        are dropped, and nothing is waited for. ``close`` is still the owner's to call."""
        self._aborted.set()
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self._sockets is not None:
            self._sockets.shut()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRewardClient:
    """asyncio client; a batch's chunks go out concurrently, at most ``max_concurrency``.
    """ + _CLIENT_ARGS

    def __init__(self, base_url: str | Sequence[str], *, token: str | None = None,
                 timeout: float = 120.0, batch_size: int = 512,
                 max_attempts: int | None = 5, retry_for_s: float | None = None,
                 backoff_s: float = 0.5, max_backoff_s: float = 10.0, cooldown_s: float = 5.0,
                 max_concurrency: int = 8,
                 transport: httpx.AsyncBaseTransport | None = None,
                 on_invalid: str = "null") -> None:
        self._o = _Options(base_url, token, timeout, batch_size, max_attempts, retry_for_s,
                           backoff_s, max_backoff_s, cooldown_s, on_invalid)
        self._http = httpx.AsyncClient(headers=self._o.headers, timeout=self._o.timeout,
                                       transport=transport)
        self._slots = asyncio.Semaphore(max_concurrency)

    @property
    def urls(self) -> list[str]:
        return self._o.endpoints.urls

    async def _request(self, method: str, path: str, json: Any = None) -> Any:
        route = self._o.route()
        async with self._slots:
            try:
                async for attempt in AsyncRetrying(**self._o.retry_kwargs(route)):
                    with attempt, route.next_server() as url:
                        return _check(await self._http.request(method, url + path,
                                                               **_body(json)))
            except (_Retryable, httpx.TransportError) as exc:
                raise self._o.unavailable(path, exc) from exc

    async def _post(self, path: str, offset: int, chunk: list[Any]) -> dict[str, Any]:
        try:
            return _placed(offset, await self._request("POST", path, {"items": chunk}))
        except RewardRequestError as exc:
            if exc.status_code == 413 and len(chunk) > 1:  # a body over the server's limit
                half = len(chunk) // 2
                first, second = await asyncio.gather(
                    self._post(path, offset, chunk[:half]),
                    self._post(path, offset + half, chunk[half:]))
                return _joined(first, second)
            raise RewardRequestError(exc.status_code, _at(offset, exc.detail)) from None

    async def _scatter(self, path: str, items: Sequence[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(
            self._post(path, offset, chunk) for offset, chunk in _offsets(self._o.chunks(items))
        )))

    async def rewards(self, items: Sequence[dict[str, Any]]) -> Rewards:
        return merge(await self._scatter("/v1/rewards" + self._o.query, items))

    async def verify(self, verifier: str, items: Sequence[dict[str, Any]]) -> Verified:
        path = f"/v1/verify/{verifier}{self._o.query}"
        return merge_verified(verifier, await self._scatter(path, items))

    async def verifiers(self) -> list[dict[str, Any]]:
        return (await self._request("GET", "/v1/verifiers"))["verifiers"]

    async def health(self) -> dict[str, Any]:
        return await self._request("GET", "/healthz")

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncRewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
