"""A snippet's container goes back to the pool whatever happens once it answered: a client
that hung up while the answer was decoded (off the event loop, a fraction of a second for a
large output) cancelled the request there, and the container was never released: the pool
was one container short for good, each time."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from sandbox import snippets
from sandbox.config import SandboxConfig
from sandbox.languages import resolve


class _Pool:
    """The EnginePool calls run_snippet makes, on one fake container."""

    def __init__(self) -> None:
        self.pools = [self]
        self.released: list[bool] = []
        self.unavailable_reason = None

    async def acquire(self) -> object:
        return "container"

    async def request(self, pooled: object, job: dict, timeout_s: float) -> dict[str, Any]:
        return {"status": "ok", "files": {}}

    def release(self, pooled: object, healthy: bool, by_holder: bool = True) -> None:
        self.released.append(healthy)


class _Sandbox:
    def __init__(self) -> None:
        self.config = SandboxConfig()
        self.pool = _Pool()


async def test_a_hang_up_while_the_answer_is_decoded_releases_the_container(
        monkeypatch) -> None:
    decoding, hung_up = threading.Event(), threading.Event()

    def slow_parse(reply: Any, limits: Any) -> None:
        decoding.set()
        hung_up.wait(10)

    monkeypatch.setattr(snippets, "_parse", slow_parse)
    sandbox = _Sandbox()
    spec = resolve("python")
    assert spec is not None
    task = asyncio.ensure_future(snippets.run_snippet(sandbox, snippets.Snippet(spec, "1")))
    while not decoding.is_set():
        await asyncio.sleep(0.01)
    task.cancel()  # the client went away (DropOnHangUp)
    hung_up.set()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert len(sandbox.pool.released) == 1, sandbox.pool.released
