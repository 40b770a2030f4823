"""What a batch costs the event loop: no more than its bytes' arrival. ``/v1/rewards``,
``/get_reward`` and ``/v1/verify/<name>`` parse and validate their bodies on a thread (FastAPI
parsed the first two on the loop, and verify did it there itself: 110-150 ms of every
caller's loop per 50 MB batch here), and build and render their answers on one (``/v1/rewards``
built and dumped its 8192 results on the loop: ~20 ms); a bad field is still a 422 naming it.
Measured as the CPU time of the server's main thread, where the loop runs, against a control
of the same bytes; the machine's load does not inflate CPU time as it does the wall clock."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import ServerProcess
from tests.helpers.cpu import loop_extra_s

ROUNDS = 5
LONG = "x" * 1_900_000  # under the field limit (2 MiB); 26 of them: a 50 MB batch


def _post(srv: ServerProcess, path: str, body: bytes, status: int, detail: str | None = None,
          **params: str) -> None:
    r = httpx.post(srv.url + path, content=body, params=params, timeout=300,
                   headers={"content-type": "application/json"})
    assert r.status_code == status, r.text[:300]
    assert detail is None or r.json()["detail"] == detail, r.text[:300]


@pytest.mark.parametrize(("path", "body", "detail"), [
    ("/v1/rewards", {"items": {"a": 1}, "pad": [LONG] * 26},
     "items: Input should be a valid list"),
    ("/get_reward", {"query": [LONG] * 26, "prompts": ["x"]},
     "body: Value error, prompts has 1 entries but query has 26"),
    ("/v1/verify/math", {"items": 5, "pad": [LONG] * 26}, "items: Input should be a valid list"),
])
def test_a_large_batch_is_parsed_off_the_loop(server: ServerProcess, path: str, body: dict,
                                              detail: str) -> None:
    """The control is the same body sent where no route reads it: the body limit receives
    and counts it on the loop as it does every body, and nothing parses it."""
    raw = json.dumps(body).encode()
    extra, spent = loop_extra_s(server, lambda: _post(server, path, raw, 422, detail),
                                lambda: _post(server, "/no-route-reads-this", raw, 404), ROUNDS,
                                calls=2)
    # parsed on the loop it cost 110-150 ms a request more than the control here; off it,
    # nothing
    assert extra < 0.1, spent


def test_a_large_answer_is_rendered_off_the_loop(server: ServerProcess) -> None:
    """8192 items each its own result (invalid: no worker runs them), against the same
    items refused as one (``on_invalid=error``): the same parse and admission, and an
    answer of 8192 results or of one line."""
    raw = json.dumps({"items": [{"verifier": "math", "response": "x"}] * 8192}).encode()
    steps = 4  # a round's requests: the kernel counts a thread's CPU time in 10 ms ticks
    extra, spent = loop_extra_s(server, lambda: _post(server, "/v1/rewards", raw, 200),
                                lambda: _post(server, "/v1/rewards", raw, 422,
                                              on_invalid="error"), ROUNDS, calls=steps)
    # built and dumped on the loop the answer cost it ~20 ms a request more than the
    # refusal here; off it, nothing
    assert extra / steps < 0.01, spent
