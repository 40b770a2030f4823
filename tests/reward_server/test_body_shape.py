"""What a body's bytes do not bound: millions of small JSON values in a few megabytes (a
million ``[]`` in a field no model reads held the event loop for seconds, parsed and then
walked there). Their count is a limit of its own, taken as the body arrives; a large body's
admission runs off the loop."""

from __future__ import annotations

import asyncio
import threading

import httpx

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
