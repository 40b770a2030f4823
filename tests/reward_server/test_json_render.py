"""json_render writes what ``json.loads`` reads back as the value, with a long string encoded
a piece at a time (each encoder call one C call holding the interpreter lock: between them a
worker thread lets the event loop in), a lone surrogate escaped rather than failing the
frame, and the text UTF-8 as pydantic writes it."""

from __future__ import annotations

import json
import random

import pytest
from pydantic import BaseModel

from reward_server import json_render
from reward_server.json_render import PIECE_CHARS, render

TEXTS = ["", "plain", 'quote " and \\ back', "é中😀", "\n\t\x00\x1f", "a\ud800b", "\udfff"]


def value(rng: random.Random, depth: int = 0) -> object:
    pick = rng.random()
    if depth > 3 or pick < 0.4:
        return rng.choice([*TEXTS, None, True, False, 0, -7, 2**70, 1.5, -0.0, 1e-300])
    if pick < 0.7:
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(TEXTS): value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.mark.parametrize("seed", range(4))
def test_what_is_rendered_reads_back_as_the_value(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        data = value(rng)
        assert json.loads(render(data)) == data, data


def test_a_long_string_is_encoded_a_piece_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    for name in ("encode_basestring", "encode_basestring_ascii"):
        encoder = getattr(json_render, name)
        monkeypatch.setattr(json_render, name,
                            lambda text, encoder=encoder: calls.append(len(text)) or encoder(text))
    text = ("x" * 1000 + "é" * 1000 + "\ud800" + '"\\\n') * 5000  # 10 MB, every kind of piece
    assert json.loads(render({"stdout": text, "display": [{"text/plain": text}]})) == {
        "stdout": text, "display": [{"text/plain": text}]}
    assert max(calls) <= PIECE_CHARS and sum(calls) >= 2 * len(text), max(calls)


def test_it_writes_what_pydantic_writes_for_an_observation() -> None:
    class Observation(BaseModel):
        stdout: str
        display: list[dict[str, str]]
        execution_time: float | None
        reward: float | None = None
        done: bool = False

    observation = Observation(stdout="é" * (3 * PIECE_CHARS) + "x", display=[{"a": "1"}],
                              execution_time=0.25)
    assert render(observation.model_dump()) == observation.model_dump_json()


def test_nan_is_null_and_anything_but_json_is_a_type_error() -> None:
    assert render([float("nan"), float("inf")]) == "[null,null]"
    for bad in ({1: "a"}, {"a": object()}, [b"bytes"]):
        with pytest.raises(TypeError):
            render(bad)


def test_an_http_answer_is_rendered_a_piece_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """``json_response`` (the routes' answers): a program's long output is encoded a piece
    at a time on a thread, where ``JSONResponse`` held the lock through one ``json.dumps``
    of all of it, and the bytes are what pydantic writes, the status kept."""
    import asyncio

    from reward_server.json_render import json_response

    calls: list[int] = []
    for name in ("encode_basestring", "encode_basestring_ascii"):
        encoder = getattr(json_render, name)
        monkeypatch.setattr(json_render, name,
                            lambda text, encoder=encoder: calls.append(len(text)) or encoder(text))

    class Answer(BaseModel):
        status: str
        stdout: str
        execution_time: float | None

    answer = Answer(status="Success", stdout=("x" * 999 + "é\n") * 10_000, execution_time=0.5)
    response = asyncio.run(json_response(lambda: answer, 503))
    assert response.status_code == 503 and response.media_type == "application/json"
    assert response.body == answer.model_dump_json().encode()
    assert max(calls) <= PIECE_CHARS and sum(calls) >= len(answer.stdout), max(calls)
