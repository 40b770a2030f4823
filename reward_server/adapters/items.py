"""Turning a trainer's (completion, dataset row) into a reward-server item.

Shared by the adapters: which dataset columns travel with a completion is decided here, once,
from the verifier's own item schema (``GET /v1/verifiers``), so a column named like an item
field (``answer``, ``tests``, ``test_code``, ``entry_point``, ``language``, ...) is passed
through without configuration, and ``columns`` renames the others.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def completion_text(completion: Any) -> str:
    """A completion as TRL hands it over: a string, or (conversational) a list of messages
    whose last one is the assistant's."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], Mapping):
        content = completion[-1].get("content", "")
        if isinstance(content, list):  # multimodal content parts
            return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        return str(content)
    raise TypeError(f"a completion must be a string or a list of messages, not "
                    f"{type(completion).__name__}")


def decode_field(value: Any) -> Any:
    """Datasets often store structured fields (test lists) as JSON strings: decode those."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def label_fields(label: Any) -> dict[str, Any]:
    """A dataset's single label column (OpenRLHF's label, veRL's ground truth) as item
    fields: a JSON object gives fields ({"tests": [...]}, {"answer": "3", "extract": ...}),
    a JSON list is a code item's tests, anything else is the answer."""
    value = decode_field(label)
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return {"tests": value}
    return {} if value is None else {"answer": str(value)}


def build_item(verifier: str, response: str, row: Mapping[str, Any], fields: set[str],
               columns: Mapping[str, str], params: Mapping[str, Any]) -> dict[str, Any]:
    """``row``'s columns that are fields of the verifier's items (or renamed to one by
    ``columns``: dataset column -> item field), plus ``params``; missing (None) values are
    left out so the server's defaults apply."""
    item: dict[str, Any] = {"verifier": verifier, "response": response}
    for column, value in row.items():
        field = columns.get(column, column if column in fields else None)
        if field is None or field in ("verifier", "response") or value is None:
            continue
        item[field] = decode_field(value)
    item.update(params)
    return item


def item_fields(verifiers: list[dict[str, Any]], verifier: str) -> set[str]:
    for info in verifiers:
        if info["name"] == verifier:
            return set(info["item_schema"].get("properties", {}))
    known = ", ".join(sorted(v["name"] for v in verifiers))
    raise ValueError(f"the reward server has no verifier {verifier!r} (it has: {known})")
