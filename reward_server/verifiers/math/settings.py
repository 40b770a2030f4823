"""The math verifier's settings section: ``--math-<field>`` / ``REWARD_SERVER_MATH_<FIELD>``
(composed into the server's settings by ``reward_server.settings``)."""

from __future__ import annotations

import os

from pydantic import BaseModel, Field


class MathSettings(BaseModel):
    # A few seconds covers every honest SymPy comparison we have seen; hostile expressions
    # (towers of powers, nested factorials) are cut off here.
    timeout_s: float = Field(3.0, gt=0, description="Wall-clock limit per math item.")
    memory_mb: int = Field(1024, ge=64, description="Address space a math worker may add to "
                           "what it was forked with (its cap).")
    workers: int = Field(0, ge=0, description="Math worker processes; 0 means one per CPU core.")
    max_answer_chars: int = Field(
        2000, ge=1, description="Longer extracted answers are a parse_error, not parsed.")
    tolerance: float = Field(
        1e-6, ge=0, description="Relative tolerance when a decimal is compared with a value.")

    def resolved_workers(self) -> int:
        return self.workers or os.cpu_count() or 1
