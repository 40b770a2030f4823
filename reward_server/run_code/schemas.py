"""SandboxFusion's ``run_code`` request and response (``sandbox/server/sandbox_api.py`` and
``sandbox/runners/types.py`` there), field for field, so its clients (veRL's
``sandbox_fusion`` reward) post here unchanged; ``limits`` is ours: what the run was allowed
after the server's caps. (No ``from __future__ import annotations``: FastAPI reads these.)"""

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr

from reward_server.provenance import SandboxProvenance
from sandbox.config import MIN_MEMORY_MB

# SandboxFusion's two levels: what a command did, and what the call as a whole came to
CommandRunStatus = Literal["Finished", "TimeLimitExceeded", "Error"]
RunStatus = Literal["Success", "Failed", "SandboxError"]


def _memory_floor(value: int) -> int:
    """A memory limit the interpreter can start under (sandbox/config.py: MIN_MEMORY_MB);
    <= 0 asks for the server's maximum. SandboxFusion takes any positive value, and a run
    that cannot start under it fails; here that is the caller's 422, not a sandbox error."""
    if 0 < value < MIN_MEMORY_MB:
        raise ValueError(f"{value} MB is below the least a program or interpreter may ask for, "
                         f"{MIN_MEMORY_MB} MB (<= 0: the server's maximum)")
    return value


# memory_limit_MB of /run_code, /run_jupyter and /v1/sessions
MemoryLimitMB = Annotated[int, AfterValidator(_memory_floor)]


class RunCodeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # SandboxFusion's own fields we do not use

    code: str = Field(description="The program.", examples=['print("hello")'])
    language: str = Field(description="SandboxFusion's name (python, cpp, nodejs, go, java, "
                          "rust, bash) or this sandbox's (c, javascript, ...).",
                          examples=["python"])
    stdin: str | None = Field(None, description="Text on the program's standard input.")
    compile_timeout: float = Field(10, gt=0, description="Seconds for the compile; capped by "
                                   "the server (REWARD_SERVER_SANDBOX_* settings).")
    run_timeout: float = Field(10, gt=0, description="Seconds of wall clock for the run; "
                               "capped by the server's max_time_limit_s.")
    memory_limit_MB: MemoryLimitMB = Field(-1, description=(
        "The program's memory; -1 (or any value <= 0): the server's maximum, max_memory_mb, "
        f"which also caps a larger value. At least {MIN_MEMORY_MB} (422 below it)."))
    files: dict[str, str | None] = Field(default_factory=dict, description="Work-dir path -> "
                                         "base64 content, written before the run (null: "
                                         "skipped, as in SandboxFusion).")
    fetch_files: list[str] = Field(default_factory=list, description="Work-dir paths read "
                                   "back after the run, as the program's user, no symbolic "
                                   "link followed; only regular files. One that cannot be "
                                   "read is left out, and message says why.")


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: float | None = Field(None, description="Seconds.")
    return_code: int | None = Field(None, description="Exit code (negative: the signal); "
                                    "null after a time limit.")
    stdout: str | None = None
    stderr: str | None = None


class AppliedLimits(BaseModel):
    """What the run was allowed: the request's limits after the server's caps."""

    compile_timeout: float
    run_timeout: float
    memory_limit_MB: int
    output_limit_bytes: int = Field(description="stdout, and stderr, each: past it the "
                                    "program is stopped (message says so).")
    response_limit_bytes: int | None = Field(None, description="stdout and stderr (as JSON "
                                             "text) and the files' base64, together: past it "
                                             "the rest is cut (``cut`` says what).")


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str = Field(description="Empty when the program ran to its own end; else what "
                         "stopped it (a limit) or why files were not fetched; the reason of a "
                         "SandboxError.")
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict, description="Fetched files, base64.")
    limits: AppliedLimits | None = None
    cut: dict[str, int] = Field(default_factory=dict, description="What the response limit "
                                "cut, with its size in bytes before: a stream "
                                "(``run_result.stdout``) keeps its first bytes, a file "
                                "(``files/<path>``) is left out. Empty: nothing was cut.")
    provenance: SandboxProvenance | None = Field(None, description="What ran it: code, "
                                                 "limits, runtime and image (ours; "
                                                 "docs/rescore.md).")
    # (image id, runtime) of the container that ran it, which its block names; None when
    # none did (a warm container outlives an image rebuilt under the same tag)
    _ran_in: tuple[str | None, str | None] | None = PrivateAttr(None)
