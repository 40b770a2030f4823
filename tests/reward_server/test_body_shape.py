"""What a body's bytes do not bound: millions of small JSON values in a few megabytes (a
million ``[]`` in a field no model reads held the event loop for seconds, parsed and then
walked there). Their count is a limit of its own, taken as the body arrives; a large body's
admission runs off the loop."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from reward_server import scoring
from tests.conftest import ServerProcess


def _junk(values: str, n: int) -> bytes:
    return ('{"items":[{"verifier":"math","response":"\\\\boxed{1}","answer":"1","junk":['
            + ",".join([values] * n) + "]}]}").encode()


def test_a_million_containers_are_refused_before_parsing(server: ServerProcess) -> None:
    body = _junk("[]", 1_100_000)  # 3.3 MB: within the body limit
    for path in ("/v1/rewards", "/v1/verify/math"):
        r = httpx.post(server.url + path, content=body, timeout=120,
                       headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text[:300]
        assert "REWARD_SERVER_MAX_JSON_" in r.json()["detail"]  # containers or values


def test_a_million_objects_are_refused_however_they_are_spaced(server: ServerProcess) -> None:
    for value in ('{"a":1}', '{\n"a":1}', '{\t "a":1}', "{ }", "{}", '  { "a" : 1 }'):
        r = httpx.post(server.url + "/v1/rewards", content=_junk(value, 1_100_000),
                       timeout=120, headers={"content-type": "application/json"})
        assert r.status_code == 413, (value, r.text[:300])
        assert "REWARD_SERVER_MAX_JSON_" in r.json()["detail"]  # containers or values


def test_latex_braces_are_not_objects(server: ServerProcess) -> None:
    """1.2 million LaTeX braces in a string are a string's bytes, not JSON objects: under
    the limits, scored (a response over the field limit scores 0)."""
    response = "\\\\frac{1}{2} " * 600_000 + "\\\\boxed{1}"
    body = '{"items":[{"verifier":"math","response":"' + response + '","answer":"1"}]}'
    assert body.count("{") > 1_100_000
    r = httpx.post(server.url + "/v1/rewards", content=body.encode(), timeout=120,
                   headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["results"][0]["status"] == "response_too_long"


def test_millions_of_numbers_are_refused_before_parsing(server: ServerProcess) -> None:
    r = httpx.post(server.url + "/v1/rewards", content=_junk("1", 1_100_000), timeout=120,
                   headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text[:300]
    assert "REWARD_SERVER_MAX_JSON_VALUES" in r.json()["detail"]


def test_an_object_of_many_keys_is_refused_before_parsing(server: ServerProcess) -> None:
    """Keys cost the parse most (a 55 MB object of 4 million held every caller's /healthz
    3.7-4.6 s, inside the byte limit): 600,000 of them, each a key and a value, are past
    the count."""
    keys = ",".join(f'"k{k}":0' for k in range(600_000))
    body = ('{"items":[{"verifier":"math","response":"\\\\boxed{1}","answer":"1",'
            '"junk":{' + keys + "}}]}").encode()
    r = httpx.post(server.url + "/v1/rewards", content=body, timeout=120,
                   headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text[:300]
    assert "REWARD_SERVER_MAX_JSON_VALUES" in r.json()["detail"]


def test_commas_and_brackets_inside_strings_are_not_counted(server: ServerProcess) -> None:
    """A string is one value whatever its text holds: 900,000 brackets, braces, commas,
    colons and escaped quotes each in a response are scored (over the field limit: 0),
    not refused."""
    response = '[{\\"a\\": 1}], ' * 900_000
    body = ('{"items":[{"verifier":"math","response":"' + response + '","answer":"1"}]}')
    assert body.count(",") + body.count("[") + body.count(":") > 2_700_000
    r = httpx.post(server.url + "/v1/rewards", content=body.encode(), timeout=120,
                   headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["results"][0]["status"] == "response_too_long"


def test_prose_with_commas_and_junk_under_the_limits_is_scored(server: ServerProcess) -> None:
    """3 MB of prose (a comma every 20 bytes) and 200,000 numbers nobody reads: under the
    limits, walked off the loop, scored."""
    prose = "Let us think, step by step, about it. " * 80_000 + "\\\\boxed{1}"
    body = ('{"items":[{"verifier":"math","response":"' + prose + '","answer":"1",'
            '"junk":[' + ",".join(["1"] * 200_000) + "]}]}").encode()
    r = httpx.post(server.url + "/v1/rewards", content=body, timeout=120,
                   headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["results"][0]["status"] == "response_too_long"  # 3 MB > the field limit


def test_a_large_bodys_admission_runs_on_a_thread() -> None:
    async def where() -> tuple[int, int]:
        return (await scoring.off_the_loop_if(True, threading.get_ident),
                await scoring.off_the_loop_if(False, threading.get_ident))

    off, on = asyncio.run(where())
    assert off != threading.get_ident() and on == threading.get_ident()


# Every JSON route, and a body with "%s" where a value goes that no model reads; a sandbox
# route's body is a 422 when parsed (a field of the wrong type), so no container runs
_ROUTES = [
    ("/v1/rewards", '{"items": [], "junk": %s}'),
    ("/get_reward", '{"query": [], "junk": %s}'),
    ("/v1/verify/math", '{"items": [], "junk": %s}'),
    ("/run_code", '{"code": 1, "language": "python", "junk": %s}'),
    ("/run_jupyter", '{"cells": [1], "junk": %s}'),
    ("/v1/sessions", '{"junk": %s}'),
]


def _post(server: ServerProcess, path: str, body: str) -> httpx.Response:
    return httpx.post(server.url + path, content=body.encode(), timeout=120,
                      headers={"content-type": "application/json"})


@pytest.mark.parametrize(("path", "body"), _ROUTES)
def test_a_body_nested_too_deeply_is_refused_naming_the_limit(server: ServerProcess,
                                                              path: str, body: str) -> None:
    """Past Python's recursion limit the parser fails with its own text (FastAPI's answer
    was a bare 400, "There was an error parsing the body"): 512 deep, the body's own object
    included, is parsed; deeper is refused as it arrives."""
    assert _post(server, path, body % ("[" * 511 + "]" * 511)).status_code != 413
    for depth in (512, 2000, 100_000):
        r = _post(server, path, body % ("[" * depth + "]" * depth))
        assert r.status_code == 413, (depth, r.text[:300])
        assert r.json()["detail"] == ("request body: arrays and objects nested more than 512 "
                                      "deep (REWARD_SERVER_MAX_JSON_DEPTH)")


@pytest.mark.parametrize(("path", "body"), _ROUTES)
def test_a_number_too_long_is_refused_naming_the_limit(server: ServerProcess, path: str,
                                                       body: str) -> None:
    """An integer's parse grows with the square of its digits, and past 4300 of them Python
    refuses it with its own text: 1000 characters are parsed, more are refused."""
    assert _post(server, path, body % ("-" + "9" * 999)).status_code != 413
    for number in ("9" * 1001, "9" * 5000, "1." + "5" * 999, "1e" + "0" * 999):
        r = _post(server, path, body % number)
        assert r.status_code == 413, (len(number), r.text[:300])
        assert r.json()["detail"] == ("request body: a number of more than 1000 characters "
                                      "(REWARD_SERVER_MAX_JSON_NUMBER_CHARS)")


def test_digits_and_brackets_in_a_string_are_text(server: ServerProcess) -> None:
    """A response of 5000 digits and 2000 brackets is one string: scored, not refused."""
    response = "[" * 2000 + "9" * 5000 + "]" * 2000 + " \\boxed{1}"
    r = _post(server, "/v1/rewards", json.dumps(
        {"items": [{"verifier": "math", "response": response, "answer": "1"}]}))
    assert r.status_code == 200, r.text[:300]
    assert r.json()["results"][0]["score"] == 1.0, r.text[:300]
