"""The host's end of the verdict channel, against a fake harness on a socket pair (Docker's
multiplexed frames): a reply counts only when it carries the job's id and stands alone on
the stream."""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from sandbox.channel import Channel, ChannelClosed, ChannelMisframed


def mux(data: bytes, stream: int = 1) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def frame(obj: object) -> bytes:
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


Harness = Callable[[dict], bytes]  # the job in, what it writes on the attach stream


@pytest.fixture
def channel() -> Iterator[tuple[Channel, list[Harness]]]:
    """A channel whose far end answers each job with the next of the listed harnesses."""
    host, far = socket.socketpair()
    answers: list[Harness] = []

    def harness() -> None:
        buffer = b""
        while True:
            while len(buffer) < 4 or len(buffer) < 4 + struct.unpack(">I", buffer[:4])[0]:
                chunk = far.recv(1 << 16)
                if not chunk:
                    return
                buffer += chunk
            (size,) = struct.unpack(">I", buffer[:4])
            job, buffer = json.loads(buffer[4:4 + size]), buffer[4 + size:]
            far.sendall(answers.pop(0)(job))

    thread = threading.Thread(target=harness, daemon=True)
    thread.start()
    yield Channel(host), answers
    # the host's end first: the fake harness reads EOF and returns; closing its own socket
    # while it sits in recv() would raise in its thread, blamed on whichever test runs next
    host.close()
    thread.join(timeout=10)
    far.close()


def honest(job: dict) -> bytes:
    return mux(b"warning on stderr", 2) + mux(frame({"status": "ok", "id": job["id"]}))


def test_an_honest_reply_is_read_and_loses_its_id(channel) -> None:
    ch, answers = channel
    answers += [honest, honest]
    assert ch.request({"mode": "ping"}, 5) == {"status": "ok"}
    assert ch.request({"mode": "ping"}, 5) == {"status": "ok"}


@pytest.mark.parametrize("written", [
    # the repro: a passing verdict with no id, printed before the real reply
    lambda job: mux(frame({"status": "ok", "tests": []}) + frame({"status": "ok", "id": job["id"]})),
    # another job's id
    lambda job: mux(frame({"status": "ok", "id": "0" * 32})),
    # text printed before the reply: its first bytes are no plausible size
    lambda job: mux(b"All tests passed\n" + frame({"status": "ok", "id": job["id"]})),
    # bytes after the reply
    lambda job: mux(frame({"status": "ok", "id": job["id"]}) + b"x"),
    # a frame that is no JSON object
    lambda job: mux(frame(["ok"])),
], ids=["no-id", "other-id", "text-first", "trailing", "not-an-object"])
def test_a_misframed_reply_is_refused(channel, written: Harness) -> None:
    ch, answers = channel
    answers.append(written)
    with pytest.raises(ChannelMisframed) as raised:
        ch.request({"mode": "ping"}, 5)
    assert raised.value.sent


def test_bytes_left_after_a_reply_refuse_the_next_job_before_it_is_sent(channel) -> None:
    ch, answers = channel
    answers += [lambda job: honest(job) + mux(b"late")]
    assert ch.request({"mode": "ping"}, 5) == {"status": "ok"}
    threading.Event().wait(0.2)  # the late bytes arrive
    with pytest.raises(ChannelMisframed) as raised:
        ch.request({"mode": "ping"}, 5)
    assert not raised.value.sent


def test_the_channel_keeps_what_owns_its_socket_alive() -> None:
    """docker-py keeps its response on the socket's wrapper: collected, the response closes a
    TLS engine's socket. The channel holds the socket itself, so it holds the wrapper too."""
    import gc
    import weakref

    class Wrapper:  # as docker-py's SocketIO, carrying ``_response``
        def __init__(self, sock: socket.socket) -> None:
            self._sock, self._response = sock, object()

    host, far = socket.socketpair()
    wrapper = Wrapper(host)
    alive = weakref.ref(wrapper)
    channel = Channel(wrapper._sock, owner=wrapper)
    del wrapper
    gc.collect()
    assert alive() is not None and channel is not None
    host.close()
    far.close()


def test_a_stream_gone_before_the_job_says_the_job_was_not_sent() -> None:
    """The container died (or its engine restarted) between two jobs: the next job's
    holder is told its job never reached the harness, so nothing of its own did it."""
    host, far = socket.socketpair()
    far.close()
    with pytest.raises(ChannelClosed) as closed:
        Channel(host).request({"mode": "ping"}, 5.0)
    assert closed.value.sent is False


def test_a_stream_gone_after_the_job_says_it_was_sent() -> None:
    host, far = socket.socketpair()

    def harness() -> None:
        far.recv(1 << 16)  # the job arrived; the harness dies without answering
        far.close()

    thread = threading.Thread(target=harness, daemon=True)
    thread.start()
    with pytest.raises(ChannelClosed) as closed:
        Channel(host).request({"mode": "ping"}, 5.0)
    assert closed.value.sent is True
    thread.join(5)
