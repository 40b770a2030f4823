"""CPU time, which the machine's load does not inflate as it does the wall clock: what a
server process itself has spent (its worker processes not counted)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import psutil

from reward_server.testing import ServerProcess


def server_cpu_s(srv: ServerProcess) -> float:
    """User + system CPU seconds of the server process (its event loop and threads); the
    scoring workers are child processes and are not counted."""
    times = psutil.Process(srv.proc.pid).cpu_times()
    return times.user + times.system


def loop_cpu_s(srv: ServerProcess) -> float:
    """User + system CPU seconds of the server's main thread, where its event loop runs: what
    a request's handling cost every other caller, its work on threads not counted."""
    (main,) = [t for t in psutil.Process(srv.proc.pid).threads() if t.id == srv.proc.pid]
    return main.user_time + main.system_time


def loop_extra_s(srv: ServerProcess, measured: Callable[[], object],
                 control: Callable[[], object], rounds: int,
                 calls: int = 1) -> tuple[float, dict[str, list]]:
    """What ``measured`` costs the server's event loop beyond ``control`` (the least of each
    over ``rounds``, interleaved: whatever else the loop does only adds to a round, and falls
    on both), and each round's cost. Each call checks its own answer. A round makes ``calls``
    calls of each: a cost near a round's noise (±0.05 s on a loaded machine) grows with them
    while the noise does not."""
    spent: dict[str, list[float]] = {"measured": [], "control": []}
    for _ in range(rounds):
        for name, call in (("measured", measured), ("control", control)):
            before = loop_cpu_s(srv)
            for _ in range(calls):
                call()
            spent[name].append(loop_cpu_s(srv) - before)
    return min(spent["measured"]) - min(spent["control"]), spent


def unread_body(srv: ServerProcess, raw: bytes) -> Callable[[], None]:
    """A control for ``loop_extra_s``: ``raw`` posted where no route reads it (counted as it
    arrives, as every body is, and not parsed)."""
    def control() -> None:
        r = httpx.post(srv.url + "/no-route-reads-this", content=raw, timeout=300,
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 404, r.text[:300]
    return control
