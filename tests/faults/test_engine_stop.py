"""Docker engines that stop and come back, on a second engine started for each test alone
(the main one and the shared gVisor engine keep serving the rest of the suite)."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from pathlib import Path

import httpx

from reward_server.testing import PROXY_SETTINGS, A, B, as_caller
from reward_server.verifiers.code import SPARE_CONTAINERS
from sandbox.testing import ExtraEngine
from tests.conftest import run_server, wait_for_sandbox

_fresh = itertools.count()


def code() -> dict:
    """A code item never seen before (so never answered from the result cache)."""
    n = next(_fresh)
    return {"verifier": "code", "response": "```python\nprint(int(input()) * 2)\n```",
            "tests": [{"input": str(n), "output": str(2 * n)}]}


def math() -> dict:
    n = next(_fresh) + 1
    return {"verifier": "math", "response": f"\\boxed{{\\frac{{1}}{{{n}}}}}",
            "answer": f"1/{n}"}


def _rewards(url: str, items: list[dict]) -> dict:
    r = httpx.post(f"{url}/v1/rewards", json={"items": items}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_engine_stopped_code_unavailable_math_fine_then_recovers(
        stoppable_engine: ExtraEngine, tmp_path: Path) -> None:
    env = {"REWARD_SERVER_SANDBOX_DOCKER_HOSTS": stoppable_engine.host,
           "REWARD_SERVER_SANDBOX_ACQUIRE_TIMEOUT_S": "5"}
    with run_server(tmp_path, env=env) as srv:
        wait_for_sandbox(srv.url)
        assert _rewards(srv.url, [code(), math()])["rewards"] == [1.0, 1.0]

        stoppable_engine.stop()
        out = _rewards(srv.url, [code(), math(), code()])
        assert out["rewards"] == [None, 1.0, None]  # never a silent 0 for the code items
        assert [r["status"] for r in out["results"]] == ["sandbox_unavailable", "ok",
                                                         "sandbox_unavailable"]
        assert "Docker engine" in out["results"][0]["detail"]
        health = httpx.get(f"{srv.url}/healthz", timeout=10)
        assert health.status_code == 200

        stoppable_engine.start()
        started = time.monotonic()
        wait_for_sandbox(srv.url, timeout_s=180)
        recovered_s = time.monotonic() - started
        assert _rewards(srv.url, [code(), math()])["rewards"] == [1.0, 1.0]
        pid = srv.proc.pid
    # the stopped engine's old containers were reaped on reconnect, the new ones at shutdown
    assert stoppable_engine.sandbox_containers() == [], \
        f"pid {pid}, recovered in {recovered_s:.1f}s"


PER_ENGINE = 2 + SPARE_CONTAINERS  # REWARD_SERVER_SANDBOX_POOL_SIZE=2, plus the warm spare


def test_two_engines_serve_one_server_and_one_can_go(
        stoppable_engine: ExtraEngine, tmp_path: Path) -> None:
    main = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    env = {"REWARD_SERVER_SANDBOX_DOCKER_HOSTS": f"{main},{stoppable_engine.host}",
           "REWARD_SERVER_SANDBOX_POOL_SIZE": "2"}
    with run_server(tmp_path, env=env) as srv:
        wait_for_sandbox(srv.url)
        # both engines fill their share of the pool (bounds for a machine at load 15)
        deadline = time.monotonic() + 180
        while (len(stoppable_engine.sandbox_containers()) < PER_ENGINE
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert len(stoppable_engine.sandbox_containers()) == PER_ENGINE

        async def many(n: int) -> list[dict]:
            async with httpx.AsyncClient(timeout=120) as client:
                replies = await asyncio.gather(*(
                    client.post(f"{srv.url}/v1/rewards",
                                json={"items": [code() for _ in range(4)]})
                    for _ in range(n)))
            return [r.json() for r in replies]

        assert all(r["rewards"] == [1.0] * 4 for r in asyncio.run(many(8)))

        stoppable_engine.stop()  # mid-service: the main engine carries on alone
        replies = asyncio.run(many(8))
        assert all(r["rewards"] == [1.0] * 4 for r in replies), replies
        stoppable_engine.start()
        deadline = time.monotonic() + 180  # and the returning engine is used again
        while (len(stoppable_engine.sandbox_containers(running=True)) < PER_ENGINE
               and time.monotonic() < deadline):
            time.sleep(0.3)
        assert len(stoppable_engine.sandbox_containers(running=True)) == PER_ENGINE
    assert stoppable_engine.sandbox_containers() == []


SNIPPET = {"code": "import time\ntime.sleep(90)\nprint('done')", "language": "python",
           "run_timeout": 95}


def test_an_engine_that_is_gone_leaves_no_slot_for_an_item_to_wait_in(tmp_path: Path) -> None:
    """Two engines set, one of them gone: the sandbox's gate lets in as many items as the
    engine that serves has containers. Caller A's minute-long snippets take what the gate
    gives such work (all its slots but one), and caller B's item is answered while every
    one of them still runs, not in a slot counted for the engine that is gone, waiting for
    a container until one of A's snippets ends."""
    main = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    gone = f"unix://{tmp_path / 'no-engine.sock'}"
    env = {"REWARD_SERVER_SANDBOX_DOCKER_HOSTS": f"{main},{gone}",
           "REWARD_SERVER_CACHE_SIZE": "0", **PROXY_SETTINGS}
    with run_server(tmp_path, env=env) as srv:
        wait_for_sandbox(srv.url)

        async def callers() -> tuple[list[bool], list[float]]:
            async with httpx.AsyncClient(timeout=300) as client:
                snippets = [asyncio.ensure_future(client.post(
                    f"{srv.url}/run_code", json=SNIPPET, headers=as_caller(A)))
                    for _ in range(3)]
                await asyncio.sleep(5)  # A's snippets hold what the gate lets them
                reply = await client.post(f"{srv.url}/v1/rewards", json={"items": [code()]},
                                          headers=as_caller(B))
                running = [not s.done() for s in snippets]
                for s in snippets:
                    s.cancel()
                await asyncio.gather(*snippets, return_exceptions=True)
                return running, reply.json()["rewards"]

        running, rewards = asyncio.run(callers())
        assert rewards == [1.0]
        assert all(running), running  # B's answer came before any of A's snippets ended
