"""The byte channel to a container's harness: its attached stdin/stdout.

The harness answers one length-prefixed JSON job with one length-prefixed JSON result. On
the way back, Docker multiplexes stdout and stderr into frames (8-byte header: stream,
0, 0, 0, big-endian size); we keep stdout and discard the harness's stderr.

Each job carries a fresh random ``id`` and its reply must carry it back, alone on the stream:
a reply of another id, one that is no JSON object, bytes after it, or bytes waiting before
the job is sent mean the stream is misframed (``ChannelMisframed``), and the runner replaces
the container rather than read on: a misframed stream's next frame is nobody's verdict."""

from __future__ import annotations

import json
import secrets
import select
import socket
import struct
import time
from typing import Any

# Larger than any reply (a build of at most 16 MB travels base64'd) and smaller than any
# length that text would spell: a frame read from printed text starts with a printable byte,
# so its "size" is 144 MiB or more and is refused at once, not waited for.
MAX_REPLY_BYTES = 64 * 1024 * 1024
STALE_READ_S = 5.0  # the rest of a Docker frame that was already arriving


class ChannelClosed(Exception):
    """The harness went away (the container died or was killed). ``sent``: whether the job
    had been sent (False: the stream was gone before it, so nothing of this job's did it:
    an earlier execution's doing, or its engine's, whose restart ends every stream)."""

    def __init__(self, message: str, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent


class ChannelMisframed(ChannelClosed):
    """The stream held something other than the job's reply (``sent`` False: bytes were
    waiting before it, left by an earlier execution)."""


class ChannelTimeout(Exception):
    """No answer within the execution's wall-clock budget."""


class Channel:
    def __init__(self, sock: socket.socket, owner: object = None) -> None:
        self._sock = sock
        # what docker-py hands back around the socket (its response, kept on the wrapper):
        # collected, it closes a TLS engine's socket under the channel
        self._owner = owner
        self._stdout = bytearray()

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """The job's reply, which must carry the job's id."""
        deadline = time.monotonic() + timeout_s
        job_id = secrets.token_hex(16)
        data = json.dumps({**message, "id": job_id}).encode()
        sent = False
        try:
            self._sock.settimeout(timeout_s)
            self._drain_stale()
            self._sock.sendall(struct.pack(">I", len(data)) + data)
            sent = True
            reply = self._read_reply(deadline, job_id)
        except TimeoutError:
            raise ChannelTimeout(f"no answer within {timeout_s:.1f} s") from None
        except ChannelMisframed:
            raise
        except ChannelClosed as exc:
            raise ChannelClosed(str(exc), sent=sent) from exc
        except (OSError, struct.error) as exc:
            raise ChannelClosed(f"harness channel broke: {exc}", sent=sent) from exc
        del reply["id"]
        return reply

    def _read_reply(self, deadline: float, job_id: str) -> dict[str, Any]:
        body = self._read_frame(deadline)
        try:
            reply = json.loads(body)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or reply.get("id") != job_id:
            raise ChannelMisframed("the harness's stream held a frame that is not this "
                                   "job's reply", sent=True)
        if self._stdout:
            raise ChannelMisframed(f"{len(self._stdout)} bytes followed the reply", sent=True)
        return reply

    def _read_frame(self, deadline: float) -> bytes:
        while True:
            if len(self._stdout) >= 4:
                (size,) = struct.unpack(">I", self._stdout[:4])
                if size > MAX_REPLY_BYTES:
                    raise ChannelMisframed(f"a frame of {size} bytes, more than any reply",
                                           sent=True)
                if len(self._stdout) >= 4 + size:
                    body = bytes(self._stdout[4 : 4 + size])
                    del self._stdout[: 4 + size]
                    return body
            self._read_mux(deadline)

    def _read_mux(self, deadline: float) -> None:
        """One frame of Docker's stream: stdout's bytes kept, stderr's dropped."""
        stream, size = struct.unpack(">BxxxL", self._recv_exact(8, deadline))
        payload = self._recv_exact(size, deadline)
        if stream == 1:
            self._stdout += payload

    def _drain_stale(self) -> None:
        """Before a job: nothing of the harness's stdout may be waiting. The harness writes
        only replies, so bytes here were written after an earlier reply: whose, and what
        more is on its way, cannot be told."""
        while select.select([self._sock], [], [], 0)[0]:
            self._read_mux(time.monotonic() + STALE_READ_S)
        if self._stdout:
            raise ChannelMisframed(f"{len(self._stdout)} bytes were waiting before the job",
                                   sent=False)

    def _recv_exact(self, n: int, deadline: float) -> bytes:
        chunks, got = [], 0
        while got < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self._sock.settimeout(remaining)
            chunk = self._sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise ChannelClosed("the harness closed its output")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        """Close the channel; a request blocked reading it (on another thread) wakes with
        ChannelClosed: ``close`` alone would leave its read waiting out its whole budget."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected, or closed already
        try:
            self._sock.close()
        except OSError:
            pass
