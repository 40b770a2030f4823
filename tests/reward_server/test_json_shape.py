"""JsonShape counts what lies outside strings exactly, however the body is cut into chunks:
checked against a byte-by-byte reading of JSON's string grammar on random documents (valid
or not) cut at random places, escapes and quotes split between chunks included, by either
way of skipping strings; so are its depth and number-length limits. Each stays linear in the
body, whatever its shape, and a body of large strings costs about a scan of its bytes."""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Callable

import pytest

from reward_server import json_shape
from reward_server.json_shape import JsonShape

PIECES = ['"', "\\", "[", "]", "{", "}", ",", ":", "a", " ", "é", "\n", '\\"', "\\\\",
          "1", "-2.5e+3", "0"]
DEPTH, NUMBER = 3, 4  # small limits, so random documents cross them, and often not


def by_hand(body: bytes, max_depth: int = DEPTH, max_number: int = NUMBER
            ) -> tuple[int, int, bool, bool]:
    """(containers, values, too deep, a number too long) outside strings, one character at
    a time: the depth as opened less closed, a number as a run of -+.0-9eE with the strings
    between taken out."""
    containers = values = depth = number = 0
    inside = escaped = too_deep = too_long = False
    for ch in body.decode("utf-8", "replace"):
        if inside:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                inside = False
            continue
        if ch == '"':
            inside = True
            continue
        number = number + 1 if ch in "-+.0123456789eE" else 0
        too_long = too_long or number > max_number
        if ch in "[{":
            containers += 1
            values += 1
            depth += 1
            too_deep = too_deep or depth > max_depth
        elif ch in "]}":
            depth -= 1
        elif ch in ",:":
            values += 1
    return containers, values, too_deep, too_long


def fed(body: bytes, rng: random.Random) -> tuple[int, int, bool, bool]:
    shape, at = JsonShape(DEPTH, NUMBER), 0
    while at < len(body):
        size = rng.choice([0, 1, 1, 2, 3, 7, 64])
        shape.feed(body[at:at + size])
        at += size
    return shape.containers, shape.values, shape.too_deep, shape.number_too_long


def document(rng: random.Random, depth: int = 0) -> object:
    pick = rng.random()
    if depth > 3 or pick < 0.3:
        return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
    if pick < 0.6:
        return [document(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if pick < 0.65:
        return rng.randint(-5, 5)
    if pick < 0.7:
        return rng.choice([1.5, -0.25, 12345.5, 1e-7])
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


def test_the_limits_are_exact_wherever_the_body_is_cut() -> None:
    at_limit = b'{"a": [' * 50 + b"1" * 100 + b"]}" * 50  # 100 deep, a number of 100
    for body, deep, long in [(at_limit, False, False),
                             (b"[" + at_limit + b"]", True, False),
                             (at_limit.replace(b"1" * 100, b"-" + b"1" * 100), False, True),
                             (b'{"a": "' + b"[" * 500 + b"1" * 500 + b'"}', False, False)]:
        for size in (1, 7, 100, len(body)):
            shape = JsonShape(100, 100)
            for at in range(0, len(body), size):
                shape.feed(body[at:at + size])
            assert (shape.too_deep, shape.number_too_long) == (deep, long), (body[:40], size)


def test_no_limit_is_watched_unless_given() -> None:
    shape = JsonShape()
    shape.feed(b"[" * 10_000 + b"9" * 10_000)
    assert (shape.too_deep, shape.number_too_long) == (False, False)


# the shapes that cost the depth and number checks most, each within the other limits
WORST = {
    "brackets at the depth limit": lambda n: b"[" * 99 + b"[]," * (n // 3),
    "closes past the opens": lambda n: b"[" * 50 + b"]" * n,
    "opens": lambda n: b"[" * n,
    "numbers at the length limit": lambda n: (b"1" * 100 + b",") * (n // 101),
    "one short of either": lambda n: (b"[" * 99 + b"1" * 100 + b"]" * 99 + b",") * (n // 399),
}


@pytest.mark.parametrize("shape_of", list(WORST))
def test_each_check_is_linear_in_the_body(shape_of: str) -> None:
    """A body four times as long costs about four times the CPU (quadratic: sixteen), fed as
    the server feeds it, in 64 KiB pieces. The least of three rounds: load only adds."""
    def cost(n: int) -> float:
        body, rounds = WORST[shape_of](n), []
        for _ in range(3):
            shape, started = JsonShape(100, 100), time.process_time()
            for at in range(0, len(body), 65536):
                shape.feed(body[at:at + 65536])
            rounds.append(time.process_time() - started)
        return min(rounds)

    small, large = cost(1_000_000), cost(4_000_000)
    assert large < 8 * max(small, 0.002), (small, large)
