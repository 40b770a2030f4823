"""The wire: length-prefixed JSON frames (between the runner and the harness, the harness and
its candidate server), the plain-data codec of the assertion proxy, and the text escaping that
keeps every verdict encodable."""

from __future__ import annotations

import base64
import json
import os
import selectors
import struct
import time

MAX_FRAME_BYTES = 64 * 1024 * 1024


def encode(value, depth=0):
    """Tagged JSON for plain data only; anything else raises TypeError."""
    if depth > 100:
        raise TypeError("value nests too deeply")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        return {"i": str(value)}
    if t is float:
        return {"f": repr(value)}
    if t is complex:
        return {"c": [repr(value.real), repr(value.imag)]}
    if t is bytes:
        return {"b": base64.b64encode(value).decode()}
    if t is list:
        return {"l": [encode(v, depth + 1) for v in value]}
    if t is tuple:
        return {"t": [encode(v, depth + 1) for v in value]}
    if t is set or t is frozenset:
        return {"s": [encode(v, depth + 1) for v in value]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    raise TypeError(f"a value of type {t.__name__} is not plain data")


def decode(node, depth=0):
    """Inverse of ``encode``; builds only plain values, whatever the input."""
    if depth > 100:
        raise ValueError("value nests too deeply")
    if node is None or isinstance(node, (bool, str)):
        return node
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError("malformed value")
    (tag, v), = node.items()
    if tag == "i":
        return int(v)
    if tag == "f":
        return float(v)
    if tag == "c":
        return complex(float(v[0]), float(v[1]))
    if tag == "b":
        return base64.b64decode(v)
    if tag == "l":
        return [decode(x, depth + 1) for x in v]
    if tag == "t":
        return tuple(decode(x, depth + 1) for x in v)
    if tag == "s":
        return {decode(x, depth + 1) for x in v}
    if tag == "d":
        return {decode(k, depth + 1): decode(x, depth + 1) for k, x in v}
    raise ValueError("malformed value")


def send_frame(fd, obj):
    data = json.dumps(obj).encode()
    os.write(fd, struct.pack(">I", len(data)))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exact(fd, n, deadline=None):
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            sel = selectors.DefaultSelector()
            sel.register(fd, selectors.EVENT_READ)
            ready = sel.select(remaining)
            sel.close()
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(fd, deadline=None, max_bytes=MAX_FRAME_BYTES):
    (size,) = struct.unpack(">I", read_exact(fd, 4, deadline))
    if size > max_bytes:
        raise ValueError("message too large")
    return json.loads(read_exact(fd, size, deadline))


def tail(data, limit):
    """The end of a program's output as text: invalid UTF-8 escaped (``\\xff``)."""
    text = data.decode("utf-8", "backslashreplace") if isinstance(data, bytes) else data
    return text[-limit:]


def printable(value):
    """``value`` with every string valid Unicode: a lone surrogate a program put in a message
    or a return value becomes the text ``\\ud800``, so no verdict fails to encode (issue 10)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value
