"""What a code item costs the event loop: nothing that grows with its tests. Its result
cache key (every field of its execution, a million expected values here) was built on the
loop for each item: about a second of every caller's loop for one 3 MB request. It is built
where the item is validated, on a thread for such a body. Measured as the CPU time of the
server's main thread against a control of the same bytes that has no program (no key, no
run); the machine's load does not inflate CPU time as it does the wall clock. The engine is
unreachable: the items come back sandbox_unavailable once past the key, no Docker needed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reward_server.testing import ServerProcess, run_server
from tests.helpers.cpu import loop_cpu_s, loop_extra_s, unread_body

VALUES = 1_000_000  # within max_json_values; the body (3 MB) over the field limit (2 MiB)
ROUNDS = 3


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path: Path = tmp_path_factory.mktemp("code-loop")
    env = {"REWARD_SERVER_SANDBOX_DOCKER_HOST": f"unix://{path}/no-docker.sock"}
    with run_server(path, env=env) as server:
        yield server


def _item(response: str) -> dict:
    return {"fn_name": "f", "response": response, "time_limit_s": 0.1,
            "tests": [{"input": "", "output": [0] * (VALUES // 4)} for _ in range(4)]}


def _loop_cost(srv: ServerProcess, item: dict) -> tuple[float, dict]:
    before = loop_cpu_s(srv)
    r = httpx.post(srv.url + "/v1/verify/code", json={"items": [item]}, timeout=300)
    assert r.status_code == 200, r.text[:300]
    return loop_cpu_s(srv) - before, r.json()["results"][0]


def test_a_code_items_cache_key_is_made_off_the_loop(srv: ServerProcess) -> None:
    spent: dict[str, list[float]] = {"program": [], "control": []}
    for _ in range(ROUNDS):  # interleaved: whatever else the loop does falls on both
        cost, result = _loop_cost(srv, _item("def f():\n    return 0\n"))
        assert result["status"] == "sandbox_unavailable", result
        spent["program"].append(cost)
        cost, result = _loop_cost(srv, _item(""))
        assert result["status"] == "no_code", result
        spent["control"].append(cost)
    # on the loop, the key cost about a second a request here; off it, nothing beyond the
    # control's. The least of each: the loop's other work only adds to a round
    extra = min(spent["program"]) - min(spent["control"])
    assert extra < 0.15, spent


def test_a_body_within_the_field_limit_is_admitted_off_the_loop(srv: ServerProcess) -> None:
    """1.9 MB of 650 Ki values, under the field limit (2 MiB), so no field walk: its
    validation ran on the loop, ~0.25 s of every caller's. Against the same bytes sent where
    no route reads them (counted as they arrive, as every body is, and not parsed)."""
    item = {**_item("def f():\n    return 0\n"),
            "tests": [{"input": "", "output": [0] * 162_500} for _ in range(4)]}
    raw = json.dumps({"items": [item]}).encode()
    assert len(raw) < 2 * 1024 * 1024

    def admitted() -> None:
        r = httpx.post(srv.url + "/v1/verify/code", content=raw, timeout=300,
                       headers={"Content-Type": "application/json"})
        assert r.json()["results"][0]["status"] == "sandbox_unavailable", r.text[:300]

    extra, spent = loop_extra_s(srv, admitted, unread_body(srv, raw), ROUNDS)
    assert extra < 0.08, spent  # on the loop: 0.2-0.25 s more than the control here
