"""The reasoning_gym verifier's settings section: ``--reasoning-gym-<field>`` /
``REWARD_SERVER_REASONING_GYM_<FIELD>`` (composed into the server's settings)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReasoningGymSettings(BaseModel):
    # One worker scores thousands of answers a second (a scorer takes microseconds to a few
    # milliseconds); each costs ~110 MB (the library and SymPy), so more is rarely worth it.
    workers: int = Field(1, ge=1, description="Scoring worker processes.")
    timeout_s: float = Field(5.0, gt=0, description="Wall-clock limit for one hand-off to a "
                             "worker (up to chunk_items answers); past it each answer of the "
                             "chunk runs alone under this limit.")
    memory_mb: int = Field(1024, ge=128, description="Address space a worker may add to what "
                           "it was forked with (its cap).")
    chunk_items: int = Field(256, ge=1, le=4096, description="Answers handed to a worker at once.")
