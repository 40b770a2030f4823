"""What a sandbox route's files cost the event loop: no more than their bytes' arrival. Their
base64 is checked on a thread (it was checked on the loop: 300 ms of every caller's loop per
request of 60 MB of files), and so is the body's parse (FastAPI parsed it on the loop: about
half a second per 58 MB here); a bad file or field is still a 422 naming it. Measured as the
CPU time of the server's main thread, where the loop runs, against a control body of the same
bytes; the machine's load does not inflate CPU time as it does the wall clock. Refused before
any container: no engine needed."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import ServerProcess, run_server
from tests.helpers.cpu import loop_extra_s

FILES = 29
# each file at the field limit's size (2 MiB), the body under its own (64 MiB)
DATA = base64.b64encode(b"\0" * 1_500_000).decode()
BAD = {"bad": "not base64!"}  # last: every file before it is checked first
ROUNDS = 5
ROUTES = [
    ("/run_code", {"code": "print(1)", "language": "python"}),
    ("/run_jupyter", {"cells": ["1"]}),
    ("/v1/sessions", {}),
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("run-code-loop")) as server:
        yield server


def _post(srv: ServerProcess, path: str, body: dict, status: int, detail: str | None) -> None:
    r = httpx.post(srv.url + path, json=body, timeout=120)
    assert r.status_code == status, r.text[:300]
    assert detail is None or r.json()["detail"] == detail, r.text[:300]


@pytest.mark.parametrize(("path", "base"), ROUTES)
def test_files_base64_is_checked_off_the_loop(srv: ServerProcess, path: str, base: dict
                                              ) -> None:
    files = {**{f"f{k}": DATA for k in range(FILES)}, **BAD}
    control = {**base, "files": BAD, "junk": [DATA] * FILES}  # the same bytes, unread
    detail = "files['bad']: not base64"
    extra, spent = loop_extra_s(srv, lambda: _post(srv, path, {**base, "files": files}, 422,
                                                   detail),
                                lambda: _post(srv, path, control, 422, None), ROUNDS, calls=2)
    # on the loop, the check cost about 150 ms a request here (5 ms a file); off it, nothing
    # beyond the control's parse of the same bytes
    assert extra < 0.1, spent

@pytest.mark.parametrize(("path", "body", "detail"), [
    ("/run_code", {"language": "python"}, "code: Field required"),
    ("/run_jupyter", {"cells": ["1"], "memory_limit_MB": "lots"},
     "memory_limit_MB: Input should be a valid integer, unable to parse string as an integer"),
    ("/v1/sessions", {"nope": 1}, "nope: Extra inputs are not permitted"),
])
def test_the_body_is_parsed_off_the_loop(srv: ServerProcess, path: str, body: dict,
                                         detail: str) -> None:
    """58 MB of files in a body with a bad field: the 422 still names it. The control is the
    same body sent where no route reads it: the body limit receives and counts it on the loop
    as it does every body, and nothing parses it."""
    body = {**body, "files": {f"f{k}": DATA for k in range(FILES)}}
    extra, spent = loop_extra_s(srv, lambda: _post(srv, path, body, 422, detail),
                                lambda: _post(srv, "/no-route-reads-this", body, 404,
                                              "Not Found"), ROUNDS, calls=2)
    # parsed on the loop (json.loads, and a copy of the body) it cost 0.2-0.25 s a request
    # here
    assert extra < 0.1, spent

@pytest.mark.parametrize("path", [p for p, _ in ROUTES])
@pytest.mark.parametrize(("raw", "detail"), [
    (b"", "body: Field required"),
    (b'{"files": {', "body: malformed JSON: Expecting property name enclosed in double quotes: "
                     "line 1 column 12 (char 11)"),
    (b"[1]", "body: Input should be a valid dictionary or object to extract fields from"),
])
def test_a_body_that_is_no_object_is_a_422(srv: ServerProcess, path: str, raw: bytes,
                                           detail: str) -> None:
    r = httpx.post(srv.url + path, content=raw, headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 422 and r.json()["detail"] == detail, r.text[:300]
