"""Bad input: each limit and malformed request gets a 4xx that says what is wrong; nothing a
client sends produces a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import KNOWN_VERIFIERS, ServerProcess, run_server

LIMITS = {
    "REWARD_SERVER_MAX_ITEMS_PER_REQUEST": "5",
    "REWARD_SERVER_MAX_FIELD_BYTES": "100",
    "REWARD_SERVER_MAX_BODY_BYTES": "4000",
}


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("limited"), env=LIMITS) as srv:
        yield srv


def _detail(r: httpx.Response) -> str:
    return r.json()["detail"]


def _post_math(http: httpx.Client, body: bytes, **params: str) -> httpx.Response:
    return http.post("/v1/verify/math", params=params, content=body,
                     headers={"content-type": "application/json"})


def _assert_refused(http: httpx.Client, body: bytes, fragment: str, **params: str) -> None:
    """The whole request is refused: a 422 whose detail names what is wrong."""
    r = _post_math(http, body, **params)
    assert r.status_code == 422, r.text
    assert fragment in _detail(r)


def test_too_many_items(limited: ServerProcess) -> None:
    items = [{"response": "\\boxed{1}", "answer": "1"}] * 6
    for path, body in (("/v1/verify/math", items), ("/v1/rewards",
                       [{"verifier": "math", **i} for i in items])):
        r = httpx.post(limited.url + path, json={"items": body}, timeout=60)
        assert r.status_code == 413
        assert "6 items exceed the limit of 5" in _detail(r)
        assert "MAX_ITEMS_PER_REQUEST" in _detail(r)


def test_field_too_large_names_the_field(limited: ServerProcess) -> None:
    """(By default the item gets a result of its own instead: test_item_errors.py.)"""
    items = [{"response": "ok", "answer": "1"}, {"response": "é" * 60, "answer": "1"}]
    r = httpx.post(limited.url + "/v1/verify/math?on_invalid=error", json={"items": items}, timeout=60)
    assert r.status_code == 413
    assert _detail(r).startswith("items[1].response: 120 bytes exceed the limit of 100")


def test_body_too_large(limited: ServerProcess) -> None:
    r = httpx.post(limited.url + "/v1/verify/math", content=b"x" * 5000,
                   headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413
    assert "body exceeds the limit of 4000 bytes" in _detail(r)


def test_body_too_large_without_content_length(limited: ServerProcess) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"items": ['
        for _ in range(100):
            yield b'{"response": "0123456789012345678901234567890123456789", "answer": "1"},'
        yield b"]}"

    r = httpx.post(limited.url + "/v1/verify/math", content=chunks(),
                   headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"items": [', "malformed JSON"),
        (b'{"items": 5}', "items: Input should be a valid list"),
        (b"[]", "body"),
        (b"", "body"),
    ],
)
def test_malformed_verify_body(http: httpx.Client, body: bytes, fragment: str) -> None:
    _assert_refused(http, body, fragment)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"items": [{"response": "x"}]}', "items[0].answer: Field required"),
        (b'{"items": [{"response": 5, "answer": "1"}]}', "items[0].response: Input should be a valid string"),
        (b'{"items": [{"response": "x", "answer": "1", "extract": "nope"}]}', "items[0].extract"),
        (b'{"items": [{"response": "x", "answer": "1", "tolerance": -1}]}', "items[0].tolerance"),
        (b'{"items": [{"response": "x", "answer": "1", "bogus": 1}]}', "items[0].bogus: Extra inputs"),
    ],
)
def test_malformed_item(http: httpx.Client, body: bytes, fragment: str) -> None:
    """A bad item: its own result naming the field, or with on_invalid=error a 422."""
    r = _post_math(http, body)
    assert r.status_code == 200, r.text
    result = r.json()["results"][0]
    assert result["status"] == "invalid_item" and result["score"] is None
    assert fragment in result["detail"]
    _assert_refused(http, body, fragment, on_invalid="error")


def test_rewards_item_errors(http: httpx.Client) -> None:
    strict = {"on_invalid": "error"}
    r = http.post("/v1/rewards", params=strict,
                  json={"items": [{"response": "x", "answer": "1"}]})
    assert r.status_code == 422
    assert "items[0].verifier" in _detail(r)
    r = http.post("/v1/rewards", params=strict, json={"items": [
        {"verifier": "math", "response": "x", "answer": "1"},
        {"verifier": "math", "response": "x"},
    ]})
    assert r.status_code == 422
    assert _detail(r) == "items[1].answer: Field required"


def test_unknown_verifier(http: httpx.Client) -> None:
    r = http.post("/v1/rewards", params={"on_invalid": "error"},
                  json={"items": [{"verifier": "chess", "response": "e4"}]})
    assert r.status_code == 404
    assert _detail(r) == f"unknown verifier 'chess'; {KNOWN_VERIFIERS}"
    assert http.post("/v1/verify/chess", json={"items": []}).status_code == 404


def test_wrong_method(http: httpx.Client) -> None:
    assert http.get("/v1/rewards").status_code == 405


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["items", "verifier", "response", "answer", "extract",
                                       "tolerance", "x"]), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=_json, path=st.sampled_from(["/v1/rewards", "/v1/verify/math"]))
def test_no_request_body_produces_a_500(http: httpx.Client, body: object, path: str) -> None:
    r = http.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code < 500, (body, r.text)
    if r.status_code >= 400:
        assert isinstance(_detail(r), str) and _detail(r)


def test_bad_cli_setting_is_one_readable_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "reward_server.cli", "--port", "notaport"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith("reward-server: invalid settings")
    assert "Traceback" not in out.stderr



def _nested(depth: int) -> str:
    """JSON text of a list ``depth`` deep."""
    return "[" * depth + "1" + "]" * depth


class _Deep:
    """A list ``depth`` deep in a request body (json.dumps would not write one that deep)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth


def _call_body(test: dict[str, object], rewards: bool = False) -> str:
    """A request body with one call-based item and its one ``test``."""
    item = {"response": "x", "fn_name": "f", "tests": [test]}
    if rewards:
        item = {"verifier": "code", **item}
    body = json.dumps({"items": [item]}, default=lambda v: f"<{v.depth} deep>")
    for value in test.values():
        if isinstance(value, _Deep):
            body = body.replace(f'"<{value.depth} deep>"', _nested(value.depth), 1)
    return body


# A call test whose input (the argument list) or expected output nests 500 deep, given as a
# JSON value or as text: each went on to the cache key's recursive walk, an HTTP 500.
_DEEP_CALLS = {
    "input": ({"input": _Deep(500), "output": 1}, "tests[0].input"),
    "output": ({"input": "[1]", "output": _Deep(500)}, "tests[0].output"),
    "output as text": ({"input": "[1]", "output": _nested(500)}, "tests[0].output"),
    "input as text, deeper than json.loads goes": (
        {"input": _nested(100_000), "output": 1}, "tests[0].input"),
}


@pytest.mark.parametrize("path", ["/v1/verify/code", "/v1/rewards"])
@pytest.mark.parametrize("case", list(_DEEP_CALLS))
def test_a_test_value_nested_too_deeply_is_refused_naming_the_field(
        http: httpx.Client, path: str, case: str) -> None:
    test, field = _DEEP_CALLS[case]
    body = _call_body(test, rewards=path == "/v1/rewards")
    r = http.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    result = r.json()["results"][0]
    assert result["status"] == "invalid_item"
    assert result["detail"] == f"items[0]: Value error, {field}: nests deeper than 64"
    r = http.post(path, params={"on_invalid": "error"}, content=body,
                  headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert _detail(r) == f"items[0]: Value error, {field}: nests deeper than 64"


def test_a_test_value_64_deep_is_accepted(http: httpx.Client) -> None:
    body = _call_body({"input": _Deep(64), "output": _Deep(64)})
    r = http.post("/v1/verify/code", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_no_depth_short_of_the_body_parsers_limit_is_a_500(http: httpx.Client) -> None:
    statuses = set()
    for depth in range(900, 1000):
        body = _call_body({"input": "[1]", "output": _Deep(depth)}, rewards=True)
        r = http.post("/v1/rewards", content=body, headers={"content-type": "application/json"})
        statuses.add(r.status_code)
    assert max(statuses) < 500, statuses
