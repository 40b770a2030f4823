"""JsonShape counts what lies outside strings exactly, however the body is cut into chunks:
checked against a byte-by-byte reading of JSON's string grammar on random documents (valid
or not) cut at random places, escapes and quotes split between chunks included, by either
way of skipping strings; and what the counting costs a body of large strings."""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Callable

import pytest

from reward_server import json_shape
from reward_server.json_shape import JsonShape

PIECES = ['"', "\\", "[", "]", "{", "}", ",", ":", "a", " ", "é", "\n", '\\"', "\\\\"]


def by_hand(body: bytes) -> tuple[int, int]:
    """(containers, values) outside strings, one byte at a time."""
    containers = values = 0
    inside = escaped = False
    for ch in body.decode("utf-8", "replace"):
        if inside:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                inside = False
        elif ch == '"':
            inside = True
        elif ch in "[{":
            containers += 1
            values += 1
        elif ch in ",:":
            values += 1
    return containers, values


def fed(body: bytes, rng: random.Random) -> tuple[int, int]:
    shape, at = JsonShape(), 0
    while at < len(body):
        size = rng.choice([0, 1, 1, 2, 3, 7, 64])
        shape.feed(body[at:at + size])
        at += size
    return shape.containers, shape.values


def document(rng: random.Random, depth: int = 0) -> object:
    pick = rng.random()
    if depth > 3 or pick < 0.3:
        return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
    if pick < 0.6:
        return [document(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if pick < 0.7:
        return rng.randint(-5, 5)
    return {document(rng, 4): document(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.fixture(params=[0, json_shape.SPARSE, 10**9], ids=["find", "mixed", "regex"])
def sparse(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every chunk skimmed by ``bytes.find``; each by its density (the server's); every
    chunk with a quote or backslash by the regular expressions."""
    monkeypatch.setattr(json_shape, "SPARSE", request.param)


@pytest.mark.usefixtures("sparse")
@pytest.mark.parametrize("seed", range(4))
def test_json_documents_cut_anywhere(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        body = json.dumps(document(rng), ensure_ascii=rng.random() < 0.5,
                          indent=rng.choice([None, 1])).encode()
        assert fed(body, rng) == by_hand(body), body


@pytest.mark.usefixtures("sparse")
@pytest.mark.parametrize("seed", range(4))
def test_any_bytes_cut_anywhere(seed: int) -> None:
    """Not JSON at all: the parser stops at the first error, but the counts still agree."""
    rng = random.Random(seed)
    for _ in range(500):
        body = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 60))).encode()
        assert fed(body, rng) == by_hand(body), body


def test_a_string_is_one_value_however_it_reads() -> None:
    shape = JsonShape()
    shape.feed(b'{"response": "a, [b], {c: d}, \\"e, f\\" \\\\", "n": [1, 2]}')
    assert (shape.containers, shape.values) == (2, 6)  # {, [, two keys, two commas


def _least_cpu_s(work: Callable[[], object], rounds: int = 5) -> float:
    spent = []
    for _ in range(rounds):
        started = time.process_time()
        work()
        spent.append(time.process_time() - started)
    return min(spent)


def test_a_body_of_large_strings_costs_about_a_scan_of_its_bytes() -> None:
    """58 MB of base64 files, in the chunks a socket hands over: counted on the event loop as
    they arrive, so at memchr speed, against one ``bytes.count`` over the same chunks (the
    regular expressions took 18-21 times that: 0.4 s of the loop a body)."""
    data = base64.b64encode(b"\0" * 1_500_000).decode()
    body = json.dumps({"code": "print(1)", "files": {f"f{k}": data for k in range(29)}}).encode()
    chunks = [body[at:at + 65536] for at in range(0, len(body), 65536)]

    def count() -> None:
        shape = JsonShape()
        for chunk in chunks:
            shape.feed(chunk)
        assert (shape.containers, shape.values) == (2, 2 + 31 + 29)  # {, {; colons; commas

    scan = _least_cpu_s(lambda: [chunk.count(b'"') for chunk in chunks])
    assert _least_cpu_s(count) < 5 * scan, scan  # ~2 times now
