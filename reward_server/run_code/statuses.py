"""How a command or a cell ended, as SandboxFusion's ``CommandRunStatus``: one table for a
``/run_code`` command (``service``) and a session's cell (``sessions``).

SandboxFusion (github.com/bytedance/SandboxFusion) reports a process that ended, however it
ended, as ``Finished`` with its ``return_code``: one the kernel killed at its memory limit is
``Finished`` with -9 (or 1: a MemoryError under its RLIMIT_AS); ``TimeLimitExceeded`` is one
its timeout stopped; ``Error`` only running it raising on the sandbox's own side
(``sandbox/runners/base.py``, ``run_command_bare``), which the call reports as
``SandboxError`` (``sandbox/server/sandbox_api.py``, ``parse_run_status``)."""

from __future__ import annotations

from reward_server.run_code.schemas import CommandRunStatus
from sandbox.harness.session import DIED
from sandbox.harness.statuses import MEMORY_LIMIT, OUTPUT_LIMIT, TIMEOUT
from sandbox.sessions import CellResult
from sandbox.snippets import EXITED, Command

INTERRUPTED = "interrupted"  # a cell its output limit interrupted (KeyboardInterrupt in it)

STATUSES: dict[str, CommandRunStatus] = {
    EXITED: "Finished",  # by itself, whatever its exit code; a cell: it answered, raised or not
    MEMORY_LIMIT: "Finished",  # killed at its memory limit, as SandboxFusion's
    OUTPUT_LIMIT: "Finished",  # a /run_code command killed there, its exit code as it died
    TIMEOUT: "TimeLimitExceeded",
    # a session's own: its cell cut short with the interpreter kept, or the interpreter gone
    # under it (it exited, or could not be stopped) and the session with it
    INTERRUPTED: "Error",
    DIED: "Error",
}


def command_status(command: Command) -> CommandRunStatus:
    """A ``/run_code`` command's: its ``ended`` is the table's word."""
    return STATUSES[command.ended]


def cell_status(cell: CellResult) -> CommandRunStatus:
    """A session's cell's: a time limit first (the interpreter killed after its interrupt is
    still the limit's doing), then the output limit's interrupt, then how it ended."""
    if cell.stopped == TIMEOUT:
        return STATUSES[TIMEOUT]
    if cell.stopped:
        return STATUSES[INTERRUPTED]
    if cell.out_of_memory:
        return STATUSES[MEMORY_LIMIT]
    return STATUSES[DIED if cell.ended == DIED else EXITED]
