"""A table's rows in one batch through a real server, as a trainer sends them: the table tests
post every row at once, then check each row as its own test."""

from __future__ import annotations

from typing import Any

import httpx


def verify_batch(http: httpx.Client, verifier: str,
                 items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``POST /v1/verify/{verifier}`` with all ``items``: their results, a 200 and one result
    per item asserted."""
    response = http.post(f"/v1/verify/{verifier}", json={"items": items})
    assert response.status_code == 200, response.text
    out = response.json()["results"]
    assert len(out) == len(items)
    return out
