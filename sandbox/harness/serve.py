"""The container's main loop (PID 1): one length-prefixed JSON job in, one verdict out, with a
warm fork server kept between executions."""

from __future__ import annotations

import signal

from . import slate
from .jobs import execute
from .processes import make_undumpable
from .protocol import JOB_FRAME_BYTES, printable, recv_frame, send_frame
from .zygote import spawn_zygote


def serve():
    """The container's main process (PID 1, which no process inside can kill): read
    length-prefixed jobs on stdin, answer each with a length-prefixed result on stdout."""
    undumpable = make_undumpable()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    zygote = spawn_zygote()
    state = slate.Slate(zygote)
    while True:
        try:
            job = recv_frame(0, max_bytes=JOB_FRAME_BYTES)
        except EOFError:
            return
        if job.get("mode") == "ping":  # the pool checks a new container with this
            send_frame(1, {"status": "pong", "undumpable": undumpable,
                           "isolated": slate.isolated(), "unclean": state.problems(zygote)})
            continue
        if zygote is None or not zygote.alive():
            zygote = respawn(zygote, state)
        result = execute(job, zygote, state)
        result["undumpable"] = undumpable
        send_frame(1, printable(result))
        # the zygote outlives executions: it holds no state but the last program's code,
        # which the next load replaces, and no candidate can reach it (another uid).
        if zygote is None or not zygote.alive():
            zygote = respawn(zygote, state)


def respawn(zygote, state):
    if zygote is not None:
        zygote.close()
    zygote = spawn_zygote()
    state.watch(zygote)
    return zygote

