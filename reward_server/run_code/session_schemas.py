"""The wire models of ``/v1/sessions`` (docs/sessions.md). A cell's result carries
SandboxFusion's ``run_jupyter`` cell fields (``stdout``, ``stderr``, ``display``, ``error``) and
its status words; a run request takes SandboxFusion's ``cells`` and ``cell_timeout`` as well
as a single ``code``. (No ``from __future__ import annotations``: FastAPI reads these.)"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reward_server.provenance import SandboxProvenance
from reward_server.run_code.schemas import CommandRunStatus, MemoryLimitMB, RunStatus
from sandbox.config import MIN_MEMORY_MB

SessionState = Literal["open", "closed", "expired", "lost", "shutdown"]


class CreateSessionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    language: str = Field("python", description="python (python3): the only language with "
                          "a notebook kernel here; see docs/sessions.md.")
    memory_limit_MB: MemoryLimitMB = Field(-1, description=(
        "The interpreter's memory (address space); <= 0: the server's max_memory_mb, which "
        f"also caps a larger value. At least {MIN_MEMORY_MB} (422 below it)."))
    idle_ttl_s: float | None = Field(None, gt=0, description="Close the session after this "
                                     "long without a cell; capped by (and unset: ) the "
                                     "server's session_idle_ttl_s.")
    files: dict[str, str | None] = Field(default_factory=dict, description="Work-dir path -> "
                                         "base64 content, written before the interpreter "
                                         "starts (null: skipped).")


class SessionLimits(BaseModel):
    cell_timeout: float = Field(description="A cell's time limit when its request sets none.")
    max_cell_timeout: float = Field(description="The most a cell may ask for.")
    memory_limit_MB: int
    output_limit_bytes: int = Field(description="stdout, and stderr, each, per cell.")
    idle_ttl_s: float


class SessionInfo(BaseModel):
    session_id: str = Field(description="Unguessable; only its creator can use it.")
    language: str
    python: str | None = Field(None, description="The interpreter's version.")
    state: SessionState = Field(description="open, or why it ended: closed (DELETE), expired "
                                "(idle past its TTL), lost (its interpreter died or was "
                                "killed), shutdown (the server stopped).")
    cells: int = Field(description="Cells run so far.")
    created_at: float = Field(description="Unix time.")
    expires_in_s: float | None = Field(None, description="Seconds of idleness left before "
                                       "the TTL closes it; null while a cell runs or after "
                                       "it ended.")
    limits: SessionLimits
    provenance: SandboxProvenance | None = Field(None, description=(
        "What runs its cells: the code, settings, runtime and image of its container, fixed "
        "when the container was made (ours; docs/rescore.md)."))


class RunCellsRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # SandboxFusion's own fields we do not use

    code: str | None = Field(None, description="One cell.", examples=["x = 41\nx + 1"])
    cells: list[str] | None = Field(None, min_length=1, max_length=64, description=(
        "Several cells, run in order (SandboxFusion's run_jupyter); the run stops at the "
        "first that does not finish cleanly."))
    cell_timeout: float = Field(0, ge=0, description="Seconds of wall clock per cell; 0: the "
                                "server's session_cell_timeout_s; capped by its "
                                "session_max_cell_timeout_s.")

    @model_validator(mode="after")
    def _one_of(self) -> "RunCellsRequest":
        if (self.code is None) == (self.cells is None):
            raise ValueError("give exactly one of code (one cell) and cells (a list)")
        return self

    @property
    def sources(self) -> list[str]:
        return [self.code] if self.code is not None else list(self.cells or [])


class CellRunResult(BaseModel):
    status: CommandRunStatus = Field(description="Finished (ran to its end, raised or not), "
                                     "TimeLimitExceeded (interrupted at its limit), Error "
                                     "(stopped otherwise: the output limit, or the "
                                     "interpreter died).")
    execution_time: float = Field(description="Seconds.")
    stdout: str
    stderr: str
    display: list[dict[str, Any]] = Field(description="The last expression's value, as "
                                          "Jupyter's execute_result data: "
                                          "[{'text/plain': repr}]; empty when None.")
    error: list[dict[str, Any]] = Field(description="The exception, as Jupyter's error "
                                        "output: [{'ename', 'evalue', 'traceback'}].")


class RunCellsResponse(BaseModel):
    status: RunStatus = Field(description="Success: every cell finished without an "
                              "exception; Failed: an exception, a limit, or the session lost; "
                              "SandboxError: the sandbox itself failed (503).")
    message: str = Field(description="Empty on Success; else what stopped the run.")
    cells: list[CellRunResult] = Field(description="The cells that ran, in order.")
    session: SessionInfo | None = None
    provenance: SandboxProvenance | None = Field(None, description="What ran it: the "
                                                 "session's block (its ``provenance``).")
