"""SandboxFusion's status of a ``/run_code`` command and of a session's cell: one table
(``reward_server/run_code/statuses.py``). A memory kill is ``Finished`` on both paths, as
SandboxFusion's own ``run_code`` reports a process killed for memory (its
``sandbox/runners/base.py``: ``Finished`` whenever the process ended, the kill's return
code with it); the sessions answered ``Error`` for it before."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from reward_server.run_code.service import response_of
from reward_server.run_code.statuses import cell_status, command_status
from sandbox.harness.session import DIED, FINISHED
from sandbox.harness.statuses import MEMORY_LIMIT, OUTPUT_LIMIT, TIMEOUT
from sandbox.sessions import CellResult, SessionLimits, _parse
from sandbox.snippets import EXITED, Command, Limits, SnippetResult

LIMITS = Limits(run_timeout_s=10.0, compile_timeout_s=10.0, memory_mb=128,
                output_limit_bytes=1024, response_limit_bytes=4096)
EMPTY = base64.b64encode(b"").decode()


def cell_reply(**fields: Any) -> dict[str, Any]:
    """The harness's answer to a session cell (sandbox/harness/session.py run_cell)."""
    cell = {"ended": FINISHED, "stopped": None, "memory": False, "unstoppable": False,
            "code": None, "time_ms": 200.0, "stdout": EMPTY, "stderr": EMPTY, "display": [],
            "error": [], **fields}
    return {"status": "ok", "cell": cell, "alive": cell["ended"] != DIED}


def test_a_memory_kill_is_finished_on_both_paths() -> None:
    # /run_code: the run killed at its memory limit, its exit code as it died
    response = response_of(SnippetResult(LIMITS, run=Command(MEMORY_LIMIT, -9, "", "", 0.2)))
    assert response.run_result is not None
    assert (response.status, response.run_result.status) == ("Failed", "Finished")
    assert response.run_result.return_code == -9
    assert "stopped at the memory limit of 128 MB" in response.message
    # a session: the kernel killed its interpreter at its memory limit (the session is lost)
    cell = _parse(cell_reply(ended=DIED, memory=True, code=-9), 10.0, SessionLimits(128, 1024))
    assert cell.out_of_memory and not cell.alive
    assert cell.note == "the interpreter ran out of its memory limit of 128 MB"
    assert cell_status(cell) == "Finished"
    # or the container's memory limit, the backstop, took its container under the cell
    assert cell_status(CellResult(DIED, "", "", 0.0, out_of_memory=True)) == "Finished"


@pytest.mark.parametrize(("ended", "status"), [
    (EXITED, "Finished"), (MEMORY_LIMIT, "Finished"), (OUTPUT_LIMIT, "Finished"),
    (TIMEOUT, "TimeLimitExceeded"),
])
def test_a_commands_status(ended: str, status: str) -> None:
    assert command_status(Command(ended, None if ended == TIMEOUT else 1, "", "", 1.0)) == status


@pytest.mark.parametrize(("fields", "status"), [
    ({}, "Finished"),  # it answered (an exception of its own is in ``error``)
    ({"stopped": TIMEOUT}, "TimeLimitExceeded"),  # interrupted at its limit
    ({"stopped": TIMEOUT, "ended": DIED, "code": -9}, "TimeLimitExceeded"),  # killed after
    ({"stopped": OUTPUT_LIMIT}, "Error"),  # interrupted at its output limit
    ({"stopped": OUTPUT_LIMIT, "ended": DIED, "memory": True}, "Error"),
    ({"ended": DIED, "code": 3}, "Error"),  # the interpreter exited: the session is lost
    ({"ended": DIED, "unstoppable": True, "memory": True}, "Error"),
    ({"ended": DIED, "memory": True, "code": -9}, "Finished"),  # killed for memory
    ({"memory": True}, "Finished"),  # a process of the cell's killed; the cell answered
])
def test_a_cells_status(fields: dict[str, Any], status: str) -> None:
    assert cell_status(_parse(cell_reply(**fields), 10.0, SessionLimits(128, 1024))) == status
