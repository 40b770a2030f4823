"""The reasoning_gym verifier's settings section: ``--reasoning-gym-<field>`` /
``REWARD_SERVER_REASONING_GYM_<FIELD>`` (composed into the server's settings)."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator


class ReasoningGymSettings(BaseModel):
    timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit for scoring one answer: "
                             "past it the answer is timeout (0) and the rest of its chunk is "
                             "scored (host scoring: for one hand-off of up to chunk_items "
                             "answers, past which each runs alone under it).")
    memory_mb: int = Field(1024, ge=128, description="Address space a chunk's scoring process "
                           "may add to what it was forked with (in the sandbox, at most "
                           "sandbox_max_memory_mb).")
    chunk_items: int = Field(256, ge=1, le=4096, description="Answers handed to a scoring "
                             "process at once (the items of one request only).")
    # Off by default: the library's scorers evaluate the answer as code (eval, parse_expr,
    # lambdify), and on the host only a deny-list stands between a completion and the server.
    host_scoring: bool = Field(False, description="Score in worker processes on the host "
                               "instead of the sandbox: for a trusted setup without Docker "
                               "only (a guard bypass there runs as the server; "
                               "docs/security.md). Needs the reasoning-gym extra on the host.")
    # A worker costs ~110 MB (the library and SymPy) and scores thousands of answers a second
    workers: int = Field(1, ge=1, description="Host scoring: scoring worker processes.")
    guard: bool = Field(True, description="Install the deny-list guard in the sandbox's "
                        "scorer too (defence in depth: the sandbox is the boundary). False "
                        "only to test that the sandbox holds on its own; never with "
                        "host_scoring.")

    @model_validator(mode="after")
    def _guarded_on_the_host(self) -> ReasoningGymSettings:
        if self.host_scoring and not self.guard:
            raise ValueError("host_scoring needs the guard: on the host it is all there is")
        return self
