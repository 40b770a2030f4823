"""A request's cells within its answer's bytes (``snippet_response_limit_bytes``, a session's
run and ``/run_jupyter``'s): what each cell's output adds to the answer as JSON, escapes
included, and a cell cut to what is left of it, each cut named as ``/run_code`` names the
streams it cuts. Before, the cell that passed the limit came back whole: an answer of 17.0 MB
against 16 MiB."""

from __future__ import annotations

import json
from typing import Any

from reward_server.run_code.session_schemas import CellRunResult
from sandbox.response_limit import fit_json, json_size

EMPTY = len(json.dumps([[], []]))  # a cell's display and error, both left out


def answer_bytes(cells: list[CellRunResult]) -> int:
    """The bytes cells' output adds to an answer as JSON, escapes included (a NUL is six:
    counted as characters, a run's answer was 6.75 times its limit); what /run_jupyter's
    fetched files may not take of it."""
    return sum(json_size(cell.stdout) + json_size(cell.stderr) + EMPTY
               + json_size(cell.display) + json_size(cell.error) for cell in cells)


def within(cell: CellRunResult, budget: int, where: str, limit: int
           ) -> tuple[CellRunResult, int, list[str]]:
    """``cell`` with its output within ``budget`` bytes of the answer (as ``answer_bytes``
    counts them), its size, and a note for each part cut or left out (none: it is whole).
    Its exception and its value are each whole or left out (a traceback says most in the
    fewest bytes); what is left goes to its stdout's first bytes, then its stderr's."""
    size = answer_bytes([cell])
    if size <= budget:
        return cell, size, []
    room, update, notes = budget - EMPTY, dict[str, Any](), []
    for name in ("error", "display"):  # a traceback, a value: each whole, or left out
        used = json_size(getattr(cell, name))
        if used <= max(0, room):
            room -= used
        else:
            update[name] = []
            notes.append(f"{where}.{name}: left out at the response limit of {limit} bytes "
                         f"({used} bytes)")
    for name in ("stdout", "stderr"):
        text = getattr(cell, name)
        update[name], used = fit_json(text, max(0, room))
        room -= used
        if len(update[name]) < len(text):
            notes.append(f"{where}.{name}: cut to its first bytes at the response limit of "
                         f"{limit} bytes ({json_size(text)} bytes)")
    cut = cell.model_copy(update=update)
    return cut, answer_bytes([cut]), notes

