"""CPU time, which the machine's load does not inflate as it does the wall clock: what a
server process itself has spent (its worker processes not counted)."""

from __future__ import annotations

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
