"""What a sandbox route's files cost the event loop: nothing but their parse. Their base64 is
checked on a thread (it was checked on the loop: 300 ms of every caller's loop per request of
60 MB of files), and a bad one is still a 422 naming it. Measured as the CPU time of the
server's main thread, where the loop runs, against a control body of the same bytes in a
field no model reads; the machine's load does not inflate CPU time as it does the wall clock.
Refused before any container: no engine needed."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import ServerProcess, run_server
from tests.helpers.cpu import loop_cpu_s

FILES = 29
# each file at the field limit's size (2 MiB), the body under its own (64 MiB)
DATA = base64.b64encode(b"\0" * 1_500_000).decode()
BAD = {"bad": "not base64!"}  # last: every file before it is checked first
ROUNDS = 5


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("run-code-loop")) as server:
        yield server


def _loop_cost(srv: ServerProcess, path: str, body: dict) -> tuple[float, httpx.Response]:
    before = loop_cpu_s(srv)
    r = httpx.post(srv.url + path, json=body, timeout=120)
    return loop_cpu_s(srv) - before, r


@pytest.mark.parametrize(("path", "base"), [
    ("/run_code", {"code": "print(1)", "language": "python"}),
    ("/run_jupyter", {"cells": ["1"]}),
    ("/v1/sessions", {}),
])
def test_files_base64_is_checked_off_the_loop(srv: ServerProcess, path: str, base: dict
                                              ) -> None:
    files = {**{f"f{k}": DATA for k in range(FILES)}, **BAD}
    control = {**base, "files": BAD, "junk": [DATA] * FILES}  # the same bytes, unread
    spent: dict[str, list[float]] = {"files": [], "control": []}
    for _ in range(ROUNDS):  # interleaved: whatever else the loop does falls on both
        cost, r = _loop_cost(srv, path, {**base, "files": files})
        assert r.status_code == 422, r.text[:300]
        assert r.json()["detail"] == "files['bad']: not base64"
        spent["files"].append(cost)
        cost, _ = _loop_cost(srv, path, control)
        spent["control"].append(cost)
    # on the loop, the check cost about 150 ms a request here (5 ms a file); off it, nothing
    # beyond the control's parse of the same bytes. The least of each: the loop's other work
    # (a pool refilling after the previous test) only adds to a round
    extra = min(spent["files"]) - min(spent["control"])
    assert extra < 0.05, spent
