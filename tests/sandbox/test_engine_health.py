"""The pool's health check of an engine (sandbox/engine_health.py): its ping, then /info,
each bounded, against a stand-in dockerd (tests/helpers/fake_dockerd.py); what a pool does
with a wedged engine's warm containers runs against a real one
(tests/faults/test_engine_wedged.py)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox.config import SandboxConfig
from sandbox.engine_health import EngineHealth
from sandbox.errors import SandboxUnavailable
from sandbox.pool import ContainerPool
from tests.helpers import fake_dockerd

# what the pool's calls on a wedged engine waited before the check came first: its client's
# whole timeout (a bound that tells that wait from none, not a speed goal)
CLIENT_TIMEOUT_S = 30.0


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[Callable[[bool], str]]:
    """Starts a stand-in dockerd (``serving`` /info, or wedged) and gives its host."""
    started = []

    def start(serving: bool) -> str:
        (tmp_path / "stacks").mkdir(exist_ok=True)
        args = [str(tmp_path / "docker.sock"), str(tmp_path / "stacks"), str(tmp_path / "pid")]
        started.append(fake_dockerd.start(args + (["serving"] if serving else [])))
        return f"unix://{tmp_path / 'docker.sock'}"

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_check_tells_a_serving_a_wedged_and_a_gone_engine(
        stand_in: Callable[[bool], str], tmp_path: Path) -> None:
    assert EngineHealth(stand_in(True), None, 2).probe() == "serves"
    assert EngineHealth(f"unix://{tmp_path / 'none.sock'}", None, 2).probe() == "gone"


def test_a_check_of_a_wedged_engine_ends_at_its_timeout(stand_in: Callable[[bool], str]
                                                        ) -> None:
    health = EngineHealth(stand_in(False), None, 1)
    started = time.monotonic()
    assert health.probe() == "wedged"
    assert time.monotonic() - started < CLIENT_TIMEOUT_S
    assert asyncio.run(health.state()) == "wedged"  # on its own thread, as the pool asks
    health.close()


def test_a_pool_that_meets_a_wedged_engine_says_so_and_starts_nothing_there(
        stand_in: Callable[[bool], str]) -> None:
    pool = ContainerPool(SandboxConfig(health_timeout_s=1), stand_in(False))

    async def connect() -> tuple[bool, float]:
        started = time.monotonic()
        connected = await pool._connect(first=True)
        elapsed = time.monotonic() - started
        with pytest.raises(SandboxUnavailable, match=r"wedged.*restart that dockerd"):
            await pool.create_own()
        await pool.close()
        return connected, elapsed

    connected, elapsed = asyncio.run(connect())
    assert not connected and pool.wedged and pool.state == "wedged"
    assert elapsed < CLIENT_TIMEOUT_S  # not the client's /version, held for its 30 s
    assert "answers its ping but not /info within 1 s" in (pool.unavailable_reason or "")


def test_a_pool_stops_beside_an_engine_that_answers_nothing_without_waiting_on_it(
        tmp_path: Path) -> None:
    """An engine whose socket takes connections and never answers (a hung dockerd, a
    black-holed host): the pool neither starts nor stops on the client's 30 s calls."""
    path = tmp_path / "silent.sock"
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(path))
    silent.listen(64)  # never accepted: every request waits for an answer
    pool = ContainerPool(SandboxConfig(health_timeout_s=1), f"unix://{path}")

    async def start_and_stop() -> float:
        started = time.monotonic()
        await pool._connect(first=True)
        await pool.close()
        return time.monotonic() - started

    try:
        assert asyncio.run(start_and_stop()) < CLIENT_TIMEOUT_S
        assert pool.state == "gone" and "not reachable" in (pool.unavailable_reason or "")
    finally:
        silent.close()
