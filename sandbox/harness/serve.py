"""The container's main loop (PID 1): one length-prefixed JSON job in, one verdict out, with a
warm fork server kept between executions."""

from __future__ import annotations

import os
import signal

from . import slate
from .jobs import execute
from .processes import make_undumpable
from .protocol import JOB_FRAME_BYTES, printable, recv_frame, send_frame
from .zygote import spawn_zygote


class Channel:
    """The descriptors of the host's channel: private copies of the container's stdin and
    stdout, which nothing but ``serve`` uses (``private_channel``)."""

    jobs = 0
    verdicts = 1


CHANNEL = Channel()


def private_channel():
    """Move the channel off fds 0 and 1 and point those at /dev/null. Trusted code runs in this
    process (the test code, its ``check``, ``test_setup``, a prompt, MBPP's imports): a
    ``print`` there, or ``input()``, went into the verdict stream or took bytes of the next
    job, and a test that printed a frame the solution returned had the runner read it as the
    verdict. The copies are non-inheritable (``os.dup``): no child gets them."""
    CHANNEL.jobs, CHANNEL.verdicts = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


def serve():
    """The container's main process (PID 1, which no process inside can kill): read
    length-prefixed jobs, answer each with a length-prefixed result that carries the job's
    ``id`` (the host's check that the reply is this job's: ``sandbox/channel.py``)."""
    private_channel()
    undumpable = make_undumpable()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    zygote = spawn_zygote()
    state = slate.Slate(zygote)
    while True:
        try:
            job = recv_frame(CHANNEL.jobs, max_bytes=JOB_FRAME_BYTES)
        except EOFError:
            return
        if job.get("mode") == "ping":  # the pool checks a new container with this
            send_frame(CHANNEL.verdicts, {
                "status": "pong", "undumpable": undumpable, "isolated": slate.isolated(),
                "unclean": state.problems(zygote), "id": job.get("id")})
            continue
        if zygote is None or not zygote.alive():
            zygote = respawn(zygote, state)
        result = execute(job, zygote, state)
        result["undumpable"] = undumpable
        result["id"] = job.get("id")
        send_frame(CHANNEL.verdicts, printable(result))
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
