"""The container's main loop (PID 1): one length-prefixed JSON job in, one verdict out, with a
warm fork server kept between executions."""

from __future__ import annotations

import os
import signal
import sys

from . import scorer, session, slate
from .jobs import execute
from .processes import make_undumpable, private_sink
from .protocol import JOB_FRAME_BYTES, printable, recv_frame, send_frame
from .zygote import spawn_zygote


class Channel:
    """The descriptors of the host's channel: private copies of the container's stdin and
    stdout, which nothing but ``serve`` uses (``private_channel``); the zygote, and so a job's
    tester (``tester``), never holds them."""

    jobs = 0
    verdicts = 1


CHANNEL = Channel()


def private_channel():
    """Move the channel off fds 0 and 1: stdin becomes /dev/null, stdout a memory file of this
    process's (``empty_stdout``). Trusted code runs in this process (the test code, its
    ``check``, ``test_setup``, a prompt, MBPP's imports): a ``print`` there, or ``input()``,
    went into the verdict stream or took bytes of the next job, and a test that printed a
    frame the solution returned had the runner read it as the verdict. The copies are
    non-inheritable (``os.dup``): no child gets them. Not /dev/null for stdout: gVisor opens
    ``/proc/1/fd/1`` for any uid by the permissions of the file it names."""
    CHANNEL.jobs, CHANNEL.verdicts = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    new_sink()


def new_sink():
    """A memory file as fd 1 (``processes.private_sink``)."""
    private_sink(1)


def empty_stdout():
    """What trusted code printed during an execution is nobody's verdict: dropped after it."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # closed or replaced by the test code: fd 1 is still the sink
    try:
        os.ftruncate(1, 0)
        os.lseek(1, 0, os.SEEK_SET)
    except OSError:  # the test code closed fd 1: a new sink, and never a dead PID 1
        new_sink()


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
            job = recv_frame(CHANNEL.jobs, session.idle_deadline(), max_bytes=JOB_FRAME_BYTES)
        except (EOFError, TimeoutError):  # a timeout: a session's host went silent
            return
        if job.get("mode") in session.MODES:  # its container serves nothing else: no sweep
            send_frame(CHANNEL.verdicts, printable({**session.handle(job), "id": job.get("id")}))
            continue
        if job.get("mode") == "ping":  # the pool checks a new container with this
            send_frame(CHANNEL.verdicts, {
                "status": "pong", "undumpable": undumpable, "isolated": slate.isolated(),
                "unclean": state.problems(zygote), "id": job.get("id")})
            continue
        if zygote is None or not zygote.alive():
            zygote = respawn(zygote, state)
        result = execute(job, zygote, state)
        empty_stdout()
        result["undumpable"] = undumpable
        result["id"] = job.get("id")
        send_frame(CHANNEL.verdicts, printable(result))
        scorer.refill(state)  # the next chunk's process, forked while the host reads this
        # the zygote outlives executions: it never reads a program (a loader it forks does,
        # and ends with the execution: zygote.py), and no candidate can reach it (another uid).
        if zygote is None or not zygote.alive():
            zygote = respawn(zygote, state)


def respawn(zygote, state):
    if zygote is not None:
        zygote.close()
    zygote = spawn_zygote()
    state.watch(zygote)
    return zygote
