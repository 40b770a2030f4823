"""The byte channel to a container's harness: its attached stdin/stdout.

The harness answers one length-prefixed JSON job with one length-prefixed JSON result. On
the way back, Docker multiplexes stdout and stderr into frames (8-byte header: stream,
0, 0, 0, big-endian size); we keep stdout and discard the harness's stderr."""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any


class ChannelClosed(Exception):
    """The harness went away (the container died or was killed)."""


class ChannelTimeout(Exception):
    """No answer within the execution's wall-clock budget."""


class Channel:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._stdout = bytearray()

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        data = json.dumps(message).encode()
        try:
            self._sock.settimeout(timeout_s)
            self._sock.sendall(struct.pack(">I", len(data)) + data)
            while True:
                if len(self._stdout) >= 4:
                    (size,) = struct.unpack(">I", self._stdout[:4])
                    if len(self._stdout) >= 4 + size:
                        body = bytes(self._stdout[4 : 4 + size])
                        del self._stdout[: 4 + size]
                        return json.loads(body)
                stream, size = struct.unpack(">BxxxL", self._recv_exact(8, deadline))
                payload = self._recv_exact(size, deadline)
                if stream == 1:
                    self._stdout += payload
        except TimeoutError:
            raise ChannelTimeout(f"no answer within {timeout_s:.1f} s") from None
        except (OSError, ValueError, struct.error) as exc:
            raise ChannelClosed(f"harness channel broke: {exc}") from exc

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
