"""How the tests tell a Docker engine that serves from one that is down or wedged, and bring
it back. A wedged engine still answers its ping while /info (what a pool asks on connecting:
dockerd walks containerd and the storage driver for it) and container work hang, so every
server after it waits out its sandbox timeout; its goroutines, dumped before the restart, say
where it hung."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from sandbox.engine_health import EngineHealth

PING_TIMEOUT_S = 10.0
# The pool's own client gives up on a call after 30 s; twice that is a wedge, not a load spike
SERVE_TIMEOUT_S = 60.0


def engine_answers(socket_path: Path, timeout_s: float = PING_TIMEOUT_S) -> bool:
    """Whether the Docker engine on ``socket_path`` answers its API's ping, in
    milliseconds when it does (``docker info`` takes a process and most of a second)."""
    return _health(socket_path, timeout_s).answers("/_ping")


def engine_serves(socket_path: Path, timeout_s: float = SERVE_TIMEOUT_S) -> bool:
    """Whether the engine answers /info too (tens of milliseconds when it serves): the
    pool's own health check (sandbox/engine_health.py), with a test's patience."""
    return _health(socket_path, timeout_s).answers("/info")


def _health(socket_path: Path, timeout_s: float) -> EngineHealth:
    return EngineHealth(f"unix://{socket_path}", None, timeout_s)


class Revival:
    """A shared engine kept serving for whoever uses it next: checked, started again if it
    does not serve, and refused to every later caller at once once a start failed or it had
    to be started ``max_starts`` times (each caller would otherwise wait out its own sandbox
    timeout, a cascade past CI's clock)."""

    def __init__(self, what: str, max_starts: int = 3) -> None:
        self.what = what
        self.max_starts = max_starts
        self.starts = 0
        self.gone: str | None = None  # why, once it is given up on

    def ensure(self, answers: Callable[[], bool], start: Callable[[], None]) -> None:
        """Raises RuntimeError where the engine does not serve and cannot be started."""
        if self.gone is not None:
            raise RuntimeError(self.gone)
        if answers():
            return
        if self.starts >= self.max_starts:
            self.gone = f"{self.what} stopped serving again after {self.starts} restarts"
            raise RuntimeError(self.gone)
        self.starts += 1
        try:
            start()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            self.gone = f"{self.what} stopped serving and did not restart: {exc}"
            raise RuntimeError(self.gone) from None
        if not answers():
            self.gone = f"{self.what} stopped serving and did not restart"
            raise RuntimeError(self.gone)


# --- A wedged dockerd: its goroutines, then a restart ----------------------------------------

_HEADER = re.compile(r"^goroutine \d+ \[([^\]]*)\]:$")
_CALL_ARGS = re.compile(r"\([^()]*\)$")  # a frame's arguments: pkg.(*T).f(0xc0, ...)
_OWN = ("github.com/docker/", "github.com/containerd/", "main.")  # in this order


def stack_digest(dump: str, top: int = 10) -> list[str]:
    """The API requests in flight in dockerd's stack dump, and its goroutines that had waited
    a minute or more, counted by their wait and their first frame of Docker's own (not the
    runtime's or a library's): where a wedged daemon hung, in a few lines. The requests come
    first (an idle daemon has long-waiting goroutines of its own: watchers, streams)."""
    counts: Counter[tuple[bool, str, str]] = Counter()
    for block in dump.split("\n\n"):
        lines = block.strip().splitlines()
        header = _HEADER.match(lines[0]) if lines else None
        if header is None:
            continue
        frames = [_CALL_ARGS.sub("", line) for line in lines[1::2]
                  if not line.startswith("created by ")]
        request = any("/api/server/router/" in f for f in frames)  # a handler, not the listener
        if not (request or "minute" in header.group(1)):
            continue
        wait = header.group(1).split(",")[0]
        own = next((f for prefix in _OWN for f in frames if f.startswith(prefix)),
                   frames[0] if frames else "?")
        counts[(request, wait, own)] += 1
    ranked = sorted(counts.items(), key=lambda kv: (not kv[0][0], -kv[1]))[:top]
    return [f"{n} x [{wait}] {'API request: ' if request else ''}{frame}"
            for (request, wait, frame), n in ranked]


def _alive(pid: int) -> bool:
    """Running, or stopped: a zombie no one reaps (a container's PID 1 may not) is gone."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:  # gone, perhaps between the two
        return False
    return state != "Z"


def _signal(pid: int, signum: int) -> None:
    """A process that ended meanwhile needs no signal."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def child_pids(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[1] == str(pid):
            kids.append(int(stat.parent.name))
    return kids


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def dump_and_stop(pid: int, exec_root: Path, keep_as: Path,
                  dump_wait_s: float = 10, term_wait_s: float = 30) -> list[str]:
    """Stop the wedged dockerd ``pid`` after asking it for its goroutines (SIGUSR1: dockerd
    writes ``goroutine-stacks-*.log`` in its exec root, ``exec_root``), kept as
    ``keep_as``: SIGTERM, SIGKILL if it does not go, and SIGKILL for what it started (its
    containerd) that outlived it. What happened, a line each, with the dump's digest."""
    said = [f"dockerd (pid {pid}) answered its ping but not /info"]
    before = set(exec_root.glob("goroutine-stacks-*.log")) if exec_root.is_dir() else set()
    _signal(pid, signal.SIGUSR1)
    deadline = time.monotonic() + dump_wait_s
    dumps: list[Path] = []
    while not dumps and time.monotonic() < deadline:
        time.sleep(0.2)
        if exec_root.is_dir():
            dumps = sorted(set(exec_root.glob("goroutine-stacks-*.log")) - before)
    if dumps:
        time.sleep(0.5)  # written in one go, but give it its last write
        shutil.copyfile(dumps[-1], keep_as)
        said.append(f"its goroutines: {keep_as}")
        said += ["  " + line for line in stack_digest(keep_as.read_text(errors="replace"))]
    else:
        said.append("it wrote no goroutine dump")
    children = child_pids(pid)  # its containerd, hung with it or not
    _signal(pid, signal.SIGTERM)
    if not _wait_gone(pid, term_wait_s):
        _signal(pid, signal.SIGKILL)
        _wait_gone(pid, 10)
        said.append("it did not stop on SIGTERM: killed")
    # a containerd left behind holds its socket, and the next dockerd's own cannot start
    left = [child for child in children if _alive(child)]
    for child in left:
        _signal(child, signal.SIGKILL)
        _wait_gone(child, 10)
    if left:
        said.append(f"what it had started and left behind killed: pids {left}")
    # its containerd's pid file names a zombie where no one reaps it (a container's PID 1
    # may not): the next dockerd would take it for a containerd running, and wait on it
    pidfile = exec_root / "containerd" / "containerd.pid"
    try:
        if not _alive(int(pidfile.read_text().strip())):
            pidfile.unlink()
    except (OSError, ValueError):
        pass
    return said


# What the checks did this session, for the run's summary: a restart heals the suite, and
# without these lines no one would learn that an engine had wedged, or where
EVENTS: list[str] = []


def stop_wedged(pid: int, socket_path: Path, exec_root: Path, name: str,
                serve_timeout_s: float = SERVE_TIMEOUT_S) -> None:
    """Stop the dockerd ``pid`` if it answers its ping but does not serve (a wedge: its
    goroutines are dumped first, kept under /tmp, and the lines go to ``EVENTS``); a dockerd
    that does not answer at all is left to the restart that follows."""
    if not (_alive(pid) and engine_answers(socket_path)):
        return
    keep_as = Path("/tmp") / f"vr-dockerd-stacks-{name}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    said = dump_and_stop(pid, exec_root, keep_as)
    said[0] += f" within {serve_timeout_s:g} s"
    EVENTS.extend(said)


def ensure_main_engine(sock: Path, restart: list[str], revival: Revival, pidfile: Path,
                       exec_root: Path, may_stop: bool,
                       serve_timeout_s: float = SERVE_TIMEOUT_S) -> None:
    """The machine's own engine on ``sock`` serves, or ``restart`` (a command) starts it
    again under ``revival``'s rules. A wedged one is stopped first (its goroutines dumped,
    ``stop_wedged``) only where ``may_stop``: a developer's engine is theirs to restart, so
    there the reason is raised instead. Raises RuntimeError where it cannot be served."""

    def serves() -> bool:
        return engine_answers(sock) and engine_serves(sock, serve_timeout_s)

    def start() -> None:
        if engine_answers(sock):
            if not may_stop:
                raise RuntimeError(f"it answers its ping but not /info within "
                                   f"{serve_timeout_s:g} s (wedged); restart the engine")
            try:
                pid = int(pidfile.read_text().strip())
            except (OSError, ValueError) as exc:
                raise RuntimeError(f"it is wedged and its pid is not in {pidfile}: "
                                   f"{exc}") from None
            stop_wedged(pid, sock, exec_root, "main", serve_timeout_s)
        out = subprocess.run(restart, capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            raise RuntimeError((out.stderr or out.stdout).strip()[-300:])
        EVENTS.append(f"{revival.what}: restarted ({' '.join(restart)})")

    revival.ensure(serves, start)
