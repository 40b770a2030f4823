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


def is_input_output(value: Any) -> bool:
    """APPS's ``input_output`` column, as TACO, PrimeIntellect and veRL's code ground truth
    store it: ``{"inputs": [...], "outputs": [...], "fn_name"?: ...}``."""
    return isinstance(value, dict) and {"inputs", "outputs"} <= value.keys() and \
        value.keys() <= {"inputs", "outputs", "fn_name"}


def input_output_fields(value: dict[str, Any]) -> dict[str, Any]:
    """An ``input_output`` object as code item fields, read the way the graders that use it
    read it (APPS's ``testing_util``, veRL's ``prime_code`` and ``sandbox_fusion``): without
    ``fn_name``, stdin/stdout tests whose input or output given as a list of lines is those
    lines joined, compared in the ``apps`` mode; with it, calls of ``fn_name`` whose input
    is the JSON list of arguments (APPS, TACO) or, as text, one JSON argument per line
    (PrimeIntellect, veRL). ValueError naming ``input_output`` when the two lists do not
    pair up: a test dropped or made up would change the reward."""
    inputs, outputs = value["inputs"], value["outputs"]
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise ValueError("input_output: 'inputs' and 'outputs' are lists")
    if len(inputs) != len(outputs):
        raise ValueError(f"input_output: {len(inputs)} inputs but {len(outputs)} outputs")
    fn_name = value.get("fn_name")
    if not fn_name:
        def text(v: Any) -> Any:
            return "\n".join(map(str, v)) if isinstance(v, list) else v
        # compared as testing_util compares stdout (stripped lines, blank ones dropped, or
        # numbers as np.allclose), the grader these rows were written for
        return {"tests": [{"input": text(i), "output": text(o)}
                          for i, o in zip(inputs, outputs, strict=True)], "compare": "apps"}
    fields: dict[str, Any] = {
        "fn_name": fn_name,
        "tests": [{"input": i, "output": o} for i, o in zip(inputs, outputs, strict=True)]}
    if inputs and all(isinstance(i, str) for i in inputs):
        fields["call_input"] = "lines"
    return fields


def label_fields(label: Any) -> dict[str, Any]:
    """A dataset's single label column (OpenRLHF's label, veRL's ground truth) as item
    fields: APPS's ``input_output`` object gives a code item's tests (``input_output_fields``),
    any other JSON object gives fields ({"tests": [...]}, {"answer": "3", "extract": ...}),
    a JSON list is a code item's tests, anything else is the answer."""
    value = decode_field(label)
    if is_input_output(value):
        return input_output_fields(value)
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
        field = columns.get(column, column if column in fields | {"input_output"} else None)
        if field is None or field in ("verifier", "response") or value is None:
            continue
        if field == "input_output":  # APPS's column, read as its own grader reads it
            if not is_input_output(decoded := decode_field(value)):
                raise ValueError("input_output: a JSON object with 'inputs', 'outputs' and "
                                 "an optional 'fn_name'")
            item.update(input_output_fields(decoded))
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
