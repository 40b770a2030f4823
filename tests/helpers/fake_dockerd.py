"""A stand-in for dockerd on a unix socket, for the engine checks' tests: it answers its
ping, and /info only when started ``serving``; a wedged one hangs on /info, writes a
goroutine dump on SIGUSR1 as dockerd does, and with ``--ignore-term`` outlives SIGTERM.

    python -m tests.helpers.fake_dockerd SOCKET STACKS_DIR PIDFILE [serving] [--ignore-term]
    python -m tests.helpers.fake_dockerd --start SOCKET ...   (in the background, once it
                                                              answers: a restart command)
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from sandbox.engine_checks import engine_answers

# two API requests stuck a long while in one place of dockerd's own, an idle goroutine
# as long, and one fresh: the digest counts the first three only, the requests first
DUMP = """goroutine 1 [chan receive, 12 minutes]:
main.main()
\t/go/src/main.go:10 +0x1

goroutine 41 [semacquire, 12 minutes]:
sync.runtime_SemacquireMutex(0xc000123, 0x0, 0x1)
\t/usr/lib/go/src/runtime/sema.go:71 +0x47
sync.(*Mutex).lockSlow(0xc000120)
\t/usr/lib/go/src/sync/mutex.go:138 +0x105
github.com/docker/docker/daemon.(*Daemon).SystemInfo(0xc0001, 0x0)
\t/build/daemon/info.go:60 +0x85
github.com/docker/docker/api/server/router/system.(*systemRouter).getInfo(0xc0002)
\t/build/api/server/router/system/system_routes.go:58 +0x10

goroutine 42 [semacquire, 11 minutes]:
sync.runtime_SemacquireMutex(0xc000123, 0x0, 0x1)
\t/usr/lib/go/src/runtime/sema.go:71 +0x47
github.com/docker/docker/daemon.(*Daemon).SystemInfo(0xc0001, 0x0)
\t/build/daemon/info.go:60 +0x85
github.com/docker/docker/api/server/router/system.(*systemRouter).getInfo(0xc0002)
\t/build/api/server/router/system/system_routes.go:58 +0x10

goroutine 43 [IO wait]:
internal/poll.runtime_pollWait(0x7f, 0x72)
\t/usr/lib/go/src/runtime/netpoll.go:222 +0x55
"""


def _serve(conn: socket.socket, serving: bool) -> None:
    with conn:
        # a client of the SDK's names its API version first (/v1.24/_ping): the same route
        request = re.sub(rb"^GET /v[0-9.]+/", b"GET /", conn.recv(4096))
        if request.startswith(b"GET /_ping "):
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nOK")
        elif request.startswith(b"GET /info ") and serving:
            conn.sendall(b'HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}')
        else:
            time.sleep(3600)  # wedged: never answers


def main(args: list[str]) -> None:
    sock_path, stacks, pidfile = Path(args[0]), Path(args[1]), Path(args[2])
    serving, ignore_term = "serving" in args[3:], "--ignore-term" in args[3:]

    def dump(*_: object) -> None:
        (stacks / f"goroutine-stacks-{time.time_ns()}.log").write_text(DUMP)

    signal.signal(signal.SIGUSR1, dump)
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock_path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(16)
    pidfile.write_text(f"{os.getpid()}\n")
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn, serving), daemon=True).start()


def start(args: list[str]) -> subprocess.Popen:
    """The stand-in started in its own session, returned once it answers its ping."""
    pidfile = Path(args[2])
    pidfile.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.fake_dockerd", *args],
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and engine_answers(Path(args[0]), 1)):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the stand-in dockerd did not start")
        time.sleep(0.05)
    return proc


if __name__ == "__main__":
    if sys.argv[1] == "--start":
        start(sys.argv[2:])
    else:
        main(sys.argv[1:])
