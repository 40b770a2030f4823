"""The reward server from code on the same Ray cluster, without HTTP: a veRL or OpenRLHF
reward function calls the deployment through a ``DeploymentHandle``, and Serve's router picks
the replica (the handle's ongoing requests feed the same autoscaler as the proxy's).

    from reward_server.ray_serve.handle import RewardHandle
    out = await RewardHandle().rewards([{"verifier": "math", "response": r, "answer": "42"}])

``compute_score`` is veRL's custom reward function over the handle (the same items, batching
and return values as ``reward_server.adapters.verl.compute_score``, which goes by URL).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError
from ray.serve.exceptions import BackPressureError
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from reward_server.adapters.verl import Batcher, _as_verl, to_item
from reward_server.client import (
    Rewards,
    RewardServerUnavailable,
    Verified,
    merge,
    merge_verified,
)
from reward_server.ray_serve.options import APP_NAME

# A replica that died or is being replaced, or every replica full: another try may land on a
# live one. The replica's own 4xx (RewardRequestError) is the caller's and is raised at once.
RETRYABLE = (RayActorError, ActorUnavailableError, BackPressureError, RewardServerUnavailable)


class RewardHandle:
    """``rewards``/``verify`` as ``AsyncRewardClient`` has them, by handle. A batch goes out
    in chunks of ``batch_size`` (so the router spreads it over replicas); a chunk whose
    replica died is sent again, to whichever replica the router picks, for up to
    ``retry_for_s``; then ``RewardServerUnavailable``, never a made-up reward."""

    def __init__(self, app_name: str | None = None, *, batch_size: int = 512,
                 retry_for_s: float = 300.0, caller: str | None = None) -> None:
        self.app_name = app_name or os.environ.get("REWARD_SERVER_RAY_APP_NAME", APP_NAME)
        self.batch_size, self.retry_for_s = batch_size, retry_for_s
        self.caller = caller or f"ray-job-{_job_id()}"  # whom the fair gates share among
        self._handle: Any = None

    def _app(self) -> Any:
        if self._handle is None:  # looked up on first use: the app may deploy after import
            self._handle = serve.get_app_handle(self.app_name)
        return self._handle

    async def rewards(self, items: Sequence[dict[str, Any]], on_invalid: str = "null") -> Rewards:
        """Score a mixed batch; each item names its ``verifier``."""
        parts = await self._scatter(lambda h, chunk: h.rewards.remote(
            chunk, on_invalid=on_invalid, caller=self.caller), items)
        return merge(parts)

    async def verify(self, verifier: str, items: Sequence[dict[str, Any]],
                     on_invalid: str = "null") -> Verified:
        parts = await self._scatter(lambda h, chunk: h.verify.remote(
            verifier, chunk, on_invalid=on_invalid, caller=self.caller), items)
        return merge_verified(verifier, parts)

    async def _scatter(self, call: Callable[[Any, list[Any]], Awaitable[dict[str, Any]]],
                       items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        chunks = [list(items[i:i + self.batch_size])
                  for i in range(0, len(items), self.batch_size)]
        return list(await asyncio.gather(*(self._send(call, c) for c in chunks)))

    async def _send(self, call: Callable[[Any, list[Any]], Awaitable[dict[str, Any]]],
                    chunk: list[Any]) -> dict[str, Any]:
        try:
            async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type(RETRYABLE), reraise=True,
                    stop=stop_after_delay(self.retry_for_s),
                    wait=wait_exponential(multiplier=0.5, max=10) + wait_random(0, 0.5)):
                with attempt:
                    return await call(self._app(), chunk)
        except RETRYABLE as exc:
            raise RewardServerUnavailable(
                f"Serve app {self.app_name!r} failed a chunk for {self.retry_for_s:g} s: "
                f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable: tenacity returns or raises")


def _job_id() -> str:
    import ray

    return ray.get_runtime_context().get_job_id() if ray.is_initialized() else str(os.getpid())


_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Batcher] = (
    weakref.WeakKeyDictionary())


def _batcher() -> Batcher:
    loop = asyncio.get_running_loop()
    if loop not in _batchers:
        _batchers[loop] = Batcher(
            RewardHandle(), int(os.environ.get("REWARD_SERVER_BATCH", "256")),  # type: ignore[arg-type]
            float(os.environ.get("REWARD_SERVER_BATCH_WAIT_MS", "5")) / 1000)
    return _batchers[loop]


async def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                        extra_info: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
    """veRL's ``custom_reward_function`` (``name: compute_score``) through the handle."""
    return _as_verl(await _batcher().submit(
        to_item(data_source, solution_str, ground_truth, extra_info)))
