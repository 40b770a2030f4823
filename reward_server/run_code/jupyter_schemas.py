"""SandboxFusion's ``run_jupyter`` request and response (``sandbox/runners/types.py`` and
``sandbox/server/sandbox_api.py`` there), field for field, so its client package
(``sandbox_fusion.run_jupyter``) posts here unchanged and parses the answer. A cell's result is
theirs (``stdout``, ``stderr``, ``display``, ``error``) with the session API's ``status`` and
``execution_time`` beside it, which their client ignores; ``limits`` is ours. (No ``from
__future__ import annotations``: FastAPI reads these.)"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from reward_server.provenance import SandboxProvenance
from reward_server.run_code.schemas import CommandRunResult, MemoryLimitMB, RunStatus
from reward_server.run_code.session_schemas import CellRunResult
from sandbox.config import MIN_MEMORY_MB

MAX_CELLS = 64  # as a session's run: each cell is a turn at the gate and a slice of the answer


class RunJupyterRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # SandboxFusion's own fields we do not use

    cells: list[str] = Field(min_length=1, max_length=MAX_CELLS, description=(
        "Code cells, run in order in one fresh interpreter whose variables they share."),
        examples=[["a = 123", "a", "print(a)", "import sys; sys.stderr.write('err')",
                   "raise RuntimeError('error message')"]])
    cell_timeout: float = Field(0, ge=0, description="Seconds of wall clock per cell; 0: the "
                                "server's session_cell_timeout_s; capped by its "
                                "session_max_cell_timeout_s and by what is left of "
                                "total_timeout.")
    total_timeout: float = Field(45, gt=0, description="Seconds for all the cells together "
                                 "(their own run time, not waits for a turn); capped by the "
                                 "server's session_max_total_timeout_s.")
    memory_limit_MB: MemoryLimitMB = Field(-1, description=(
        "The interpreter's memory (address space); <= 0: the server's max_memory_mb, which "
        f"also caps a larger value. At least {MIN_MEMORY_MB} (422 below it)."))
    kernel: Literal["python3"] = Field("python3", description="The only kernel, as in "
                                       "SandboxFusion.")
    files: dict[str, str | None] = Field(default_factory=dict, description="Work-dir path -> "
                                         "base64 content, written before the first cell "
                                         "(null: skipped).")
    fetch_files: list[str] = Field(default_factory=list, description="Work-dir paths read "
                                   "back after the last cell, as the cells' user, no symbolic "
                                   "link followed; only regular files. One that cannot be "
                                   "read is left out, and message says why.")


class JupyterLimits(BaseModel):
    """What the run was allowed: the request's limits after the server's caps."""

    cell_timeout: float
    total_timeout: float
    memory_limit_MB: int
    output_limit_bytes: int = Field(description="stdout, and stderr, each, per cell (a "
                                    "displayed value too): past it the cell is interrupted.")
    response_limit_bytes: int = Field(description="The cells' output and the files' base64 "
                                      "together: the cell that reaches it is cut there, "
                                      "later cells do not run and files are left out "
                                      "(message says which).")


class RunJupyterResponse(BaseModel):
    status: RunStatus = Field(description="Success: every cell ran to its end (one that "
                              "raised too: its error is in its cell, as in SandboxFusion); "
                              "Failed: a limit stopped a cell, the interpreter died, or "
                              "cells were left unrun; SandboxError (503): the sandbox failed.")
    message: str = Field(description="Empty when every cell ran and every file came back; "
                         "else what stopped the run, and why a file was not fetched.")
    driver: CommandRunResult | None = Field(None, description="The run as a whole, in "
                                            "SandboxFusion's driver's place: Finished, "
                                            "TimeLimitExceeded (a cell's limit or "
                                            "total_timeout), or Error (another limit, the "
                                            "interpreter lost); its seconds.")
    cells: list[CellRunResult] = Field(default_factory=list, description="The cells that "
                                       "ran, in order.")
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict, description="Fetched files, base64.")
    limits: JupyterLimits | None = None
    provenance: SandboxProvenance | None = Field(None, description="What ran it: code, "
                                                 "limits, runtime and image (ours; "
                                                 "docs/rescore.md).")
