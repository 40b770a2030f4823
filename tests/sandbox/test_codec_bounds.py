"""The bounds of the harness's codec and frames, on the host: what the trusted side decodes
from the candidate costs time linear in its size, and a frame it will not read is refused
before it is read (tests/sandbox/test_harness_bounds.py runs the same through a container)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from sandbox.harness import protocol

P = protocol.HASH_MODULUS  # ints equal modulo P share a hash


def wire(value: object) -> object:
    return json.loads(json.dumps(protocol.encode(value)))


@pytest.mark.parametrize("value", [
    [i * P for i in range(1, 10)],
    {i * P for i in range(1, 10)},
    {i * P: 0 for i in range(1, 10)},
    [[i * P] for i in range(1, 10)],  # a list the tests may make a tuple
    [(i * P, 1) for i in range(1, 10)],
    [float(2 ** (61 * k)) for k in range(1, 10)],  # 2**61 is 1 modulo P
    [[[i * P]] for i in range(1, 10)],
])
def test_decode_refuses_values_whose_elements_collide_in_hash(value: object) -> None:
    with pytest.raises(ValueError, match="share one hash"):
        protocol.decode(wire(value))


def test_refusing_100000_colliding_ints_takes_no_time() -> None:
    """Building their set costs ~26 s; the refusal comes at the ninth."""
    node = {"s": [{"i": str(i * P)} for i in range(1, 100_001)]}
    started = time.process_time()  # CPU time: the machine's load must not decide the test
    with pytest.raises(ValueError):
        protocol.decode(node)
    assert time.process_time() - started < 0.5


@pytest.mark.parametrize("value", [
    [-1, -2, 1, 1.0, True, 0, 0.0, -0.0, False],  # equal or own hashes: none distinct-colliding
    [P * i for i in range(1, 8)] * 1000,  # repeats of 7 colliding values
    [[0] * 3] * 1000, [(1, "a")] * 1000,
    {str(i * P): i for i in range(100)},  # strings hash with the process's secret seed
    [[[[[i]]]] for i in range(1000)],
])
def test_decode_keeps_honest_values(value: object) -> None:
    assert protocol.decode(wire(value)) == value


def test_decode_keeps_many_nans() -> None:
    """Each NaN hashes by its identity: a hundred decoded ones are a hundred hashes."""
    assert len(protocol.decode(wire([float("nan")] * 100))) == 100


def test_decode_refuses_values_nested_too_deeply() -> None:
    node: object = {"i": "1"}
    for _ in range(protocol.MAX_DEPTH + 1):
        node = {"l": [node]}
    with pytest.raises(ValueError, match="nests too deeply"):
        protocol.decode(node)


@pytest.mark.parametrize("node", [
    {"i": 5}, {"i": ["1"]}, {"c": ["1"]}, {"c": "12"}, {"b": "!!"}, {"l": "x"},
    {"d": [[{"i": "1"}]]}, {"d": [[{"l": []}, None]]}, {"s": [{"l": []}]}, {"f": None},
])
def test_decode_refuses_malformed_nodes_with_value_error(node: object) -> None:
    with pytest.raises(ValueError):
        protocol.decode(node)


def test_a_frame_from_the_candidate_over_the_bound_is_refused_unread() -> None:
    """A 60 MB frame once got the harness OOM-killed: its size is all that is read of it."""
    r, w = os.pipe()
    size = 60 * 1024 * 1024
    writer = threading.Thread(target=os.write, args=(w, size.to_bytes(4, "big") + b"x" * 1000))
    writer.start()
    try:
        with pytest.raises(ValueError, match="too large"):
            protocol.recv_frame(r, deadline=time.monotonic() + 5)
        writer.join(5)
        assert os.read(r, 1000) == b"x" * 1000  # the body is still there: never read
    finally:
        os.close(r)
        os.close(w)


def test_send_frame_refuses_a_frame_over_its_bound_and_writes_nothing() -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(ValueError, match="too large"):
            protocol.send_frame(w, {"value": "x" * 100}, max_bytes=50)
        protocol.send_frame(w, {"ok": 1}, max_bytes=50)
        assert protocol.recv_frame(r) == {"ok": 1}
        big = {"x": "y" * (protocol.CANDIDATE_FRAME_BYTES // 2)}
        thread = threading.Thread(target=protocol.send_frame, args=(w, big))
        thread.start()
        assert protocol.recv_frame(r, time.monotonic() + 30, protocol.JOB_FRAME_BYTES) == big
        thread.join(5)
    finally:
        os.close(r)
        os.close(w)
