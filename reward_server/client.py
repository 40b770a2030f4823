"""Python client for the reward server, for our trainer and for users' own training loops.

Needs only httpx and tenacity (no server dependencies). Large batches are split into
requests of ``batch_size`` items (the async client sends them concurrently). Connect
errors, timeouts, 429 and 5xx are retried with exponential backoff and jitter; any other
4xx is the caller's mistake and raised at once with the server's message. After
``max_attempts`` the call raises ``RewardServerUnavailable``: a failed call is never
silently a reward of 0.

    with RewardClient("http://127.0.0.1:8000") as client:
        out = client.rewards([{"verifier": "math", "response": r, "answer": "42"}])
        out.rewards   # [1.0]
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

__all__ = [
    "AsyncRewardClient",
    "RewardClient",
    "RewardClientError",
    "RewardRequestError",
    "RewardServerUnavailable",
    "Rewards",
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


class _Retryable(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}: {response.text[:200]}")


@dataclass(frozen=True)
class Rewards:
    rewards: list[float | None]
    results: list[dict[str, Any]]


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


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _merge(parts: Sequence[dict[str, Any]]) -> Rewards:
    return Rewards(
        rewards=[r for part in parts for r in part["rewards"]],
        results=[r for part in parts for r in part["results"]],
    )


class _Options:
    def __init__(self, base_url: str, token: str | None, timeout: float, batch_size: int,
                 max_attempts: int, backoff_s: float, max_backoff_s: float) -> None:
        if batch_size < 1 or max_attempts < 1:
            raise ValueError("batch_size and max_attempts must be at least 1")
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self.batch_size = batch_size
        self.retry_kwargs: dict[str, Any] = dict(
            retry=retry_if_exception(_is_retryable),
            stop=stop_after_attempt(max_attempts),
            wait=wait_exponential(multiplier=backoff_s, max=max_backoff_s)
            + wait_random(0, backoff_s),
            reraise=True,
        )
        self.max_attempts = max_attempts

    def unavailable(self, path: str, exc: BaseException) -> RewardServerUnavailable:
        return RewardServerUnavailable(
            f"reward server at {self.base_url} failed {path} after {self.max_attempts} "
            f"attempts: {type(exc).__name__}: {exc}"
        )


class RewardClient:
    """Blocking client; one connection pool, reused across calls."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 120.0,
                 batch_size: int = 512, max_attempts: int = 5, backoff_s: float = 0.5,
                 max_backoff_s: float = 10.0, transport: httpx.BaseTransport | None = None
                 ) -> None:
        self._o = _Options(base_url, token, timeout, batch_size, max_attempts, backoff_s,
                           max_backoff_s)
        self._http = httpx.Client(base_url=self._o.base_url, headers=self._o.headers,
                                  timeout=self._o.timeout, transport=transport)

    def _request(self, method: str, path: str, json: Any = None) -> Any:
        try:
            for attempt in Retrying(**self._o.retry_kwargs):
                with attempt:
                    return _check(self._http.request(method, path, json=json))
        except (_Retryable, httpx.TransportError) as exc:
            raise self._o.unavailable(path, exc) from exc

    def rewards(self, items: Sequence[dict[str, Any]]) -> Rewards:
        """Score a mixed batch; each item names its ``verifier``."""
        parts = [self._request("POST", "/v1/rewards", {"items": list(chunk)})
                 for chunk in _chunks(items, self._o.batch_size)]
        return _merge(parts)

    def verify(self, verifier: str, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for chunk in _chunks(items, self._o.batch_size)
                for r in self._request("POST", f"/v1/verify/{verifier}",
                                       {"items": list(chunk)})["results"]]

    def verifiers(self) -> list[dict[str, Any]]:
        return self._request("GET", "/v1/verifiers")["verifiers"]

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/healthz")

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRewardClient:
    """asyncio client; a batch's chunks go out concurrently, at most ``max_concurrency``."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 120.0,
                 batch_size: int = 512, max_attempts: int = 5, backoff_s: float = 0.5,
                 max_backoff_s: float = 10.0, max_concurrency: int = 8,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._o = _Options(base_url, token, timeout, batch_size, max_attempts, backoff_s,
                           max_backoff_s)
        self._http = httpx.AsyncClient(base_url=self._o.base_url, headers=self._o.headers,
                                       timeout=self._o.timeout, transport=transport)
        self._slots = asyncio.Semaphore(max_concurrency)

    async def _request(self, method: str, path: str, json: Any = None) -> Any:
        async with self._slots:
            try:
                async for attempt in AsyncRetrying(**self._o.retry_kwargs):
                    with attempt:
                        return _check(await self._http.request(method, path, json=json))
            except (_Retryable, httpx.TransportError) as exc:
                raise self._o.unavailable(path, exc) from exc

    async def rewards(self, items: Sequence[dict[str, Any]]) -> Rewards:
        parts = await asyncio.gather(*(
            self._request("POST", "/v1/rewards", {"items": list(chunk)})
            for chunk in _chunks(items, self._o.batch_size)
        ))
        return _merge(parts)

    async def verify(self, verifier: str, items: Sequence[dict[str, Any]]
                     ) -> list[dict[str, Any]]:
        parts = await asyncio.gather(*(
            self._request("POST", f"/v1/verify/{verifier}", {"items": list(chunk)})
            for chunk in _chunks(items, self._o.batch_size)
        ))
        return [r for part in parts for r in part["results"]]

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
