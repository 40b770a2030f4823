"""JsonShape counts what lies outside strings exactly, however the body is cut into chunks:
checked against a byte-by-byte reading of JSON's string grammar on random documents (valid
or not) cut at random places, escapes and quotes split between chunks included."""

from __future__ import annotations

import json
import random

import pytest

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


@pytest.mark.parametrize("seed", range(4))
def test_json_documents_cut_anywhere(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        body = json.dumps(document(rng), ensure_ascii=rng.random() < 0.5,
                          indent=rng.choice([None, 1])).encode()
        assert fed(body, rng) == by_hand(body), body


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
