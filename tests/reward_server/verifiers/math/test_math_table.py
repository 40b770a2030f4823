"""The math verifier against the labelled table (reward_server/verifiers/math/labelled_cases.py),
through the real server.

All cases go out in one batch (as a trainer sends them); each case is then its own test."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from reward_server.verifiers.math.labelled_cases import EQUIVALENCE, EXTRACTION, MODES, TOLERANCE
from tests.helpers.batch import verify_batch

ITEMS: list[dict[str, Any]] = (
    [{"response": r, "answer": a} for r, a, _ in EQUIVALENCE + EXTRACTION]
    + [{"response": r, "answer": a, "extract": m} for r, a, m, _, _ in MODES]
    + [{"response": r, "answer": a, "tolerance": t} for r, a, t, _ in TOLERANCE]
)
EXPECTED: list[tuple[bool, str | None]] = (
    [(c, "ok") for *_, c in EQUIVALENCE + EXTRACTION]
    + [(c, s) for *_, c, s in MODES]
    + [(c, "ok") for *_, c in TOLERANCE]
)


def test_table_is_large_and_balanced() -> None:
    assert len(ITEMS) >= 200
    assert sum(1 for correct, _ in EXPECTED if not correct) >= len(ITEMS) / 3


@pytest.fixture(scope="module")
def results(http: httpx.Client) -> list[dict[str, Any]]:
    return verify_batch(http, "math", ITEMS)


@pytest.mark.parametrize("index", range(len(ITEMS)), ids=lambda i: ITEMS[i]["response"][-40:])
def test_case(results: list[dict[str, Any]], index: int) -> None:
    item, (correct, status), got = ITEMS[index], EXPECTED[index], results[index]
    assert got["correct"] is correct, (item, got)
    assert got["score"] == (1.0 if correct else 0.0)
    assert got["status"] == status, (item, got)


@pytest.mark.parametrize("path", ["/v1/verify/math", "/v1/rewards"])
def test_lone_surrogate_does_not_fail_the_batch(http: httpx.Client, path: str) -> None:
    """JSON may carry a lone surrogate; the answer echoed back must still encode."""
    extra = {"verifier": "math"} if path == "/v1/rewards" else {}
    items = [{"response": "\\boxed{3}", "answer": "3", **extra},
             {"response": "\\boxed{\ud800}", "answer": "3", **extra}]
    body = json.dumps({"items": items})  # ASCII: "\ud800" travels as an escape
    response = http.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["score"] for r in results] == [1.0, 0.0]
    assert results[1]["extracted"] == "\\ud800"


@pytest.mark.parametrize("answer", ["", "#### ", "$$", "\\boxed{}"])
def test_empty_reference_is_bad_input(http: httpx.Client, answer: str) -> None:
    """The dataset's fault, not a 0 the completion earned: a 422 naming the field."""
    response = http.post("/v1/verify/math?on_invalid=error",
                         json={"items": [{"response": "\\boxed{3}", "answer": answer}]})
    assert response.status_code == 422, response.text
    assert "answer" in response.text and "empty" in response.text
