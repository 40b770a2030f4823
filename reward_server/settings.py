"""Server settings: environment variables (prefix ``REWARD_SERVER_``), an optional ``.env``
file, and the ``reward-server`` command line, all through pydantic-settings so the three
agree and ``--help`` lists every one."""

from __future__ import annotations

import os
from functools import lru_cache

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="REWARD_SERVER_", env_file=".env", extra="ignore", cli_kebab_case=True
    )

    host: str = Field("127.0.0.1", description="Interface to bind; 0.0.0.0 in a container.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port.")
    workers: int = Field(
        1, ge=1, description="uvicorn worker processes; each owns its own verifier pools."
    )
    log_level: str = Field("info", description="uvicorn log level.")
    api_token: SecretStr | None = Field(
        None, description="If set, every route but /healthz needs 'Authorization: Bearer <token>'."
    )

    # Request limits: each answered with 413 naming the limit, never a 500 or an OOM.
    max_items_per_request: int = Field(8192, ge=1, description="Items in one request.")
    max_field_bytes: int = Field(
        2 * 1024 * 1024, ge=1, description="UTF-8 bytes in any one string field of an item."
    )
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1, description="Bytes in a request body.")

    # Math verifier. A few seconds covers every honest SymPy comparison we have seen; hostile
    # expressions (towers of powers, nested factorials) are cut off here.
    math_timeout_s: float = Field(3.0, gt=0, description="Wall-clock limit per math item.")
    math_memory_mb: int = Field(1024, ge=64, description="Address-space cap per math worker.")
    math_workers: int = Field(
        0, ge=0, description="Math worker processes; 0 means one per CPU core."
    )
    math_max_answer_chars: int = Field(
        2000, ge=1, description="Longer extracted answers are a parse_error, not parsed."
    )
    math_tolerance: float = Field(
        1e-6, ge=0, description="Relative tolerance when a decimal is compared with a value."
    )
    cache_size: int = Field(
        100_000, ge=0, description="Entries in the per-process result cache; 0 turns it off."
    )

    # Fair scheduling: one slow batch never stalls everyone else's rewards. The budget counts
    # only time a request's caller is shut out by other callers (fair_queue): what its own
    # slow items cost is never cut, or slowness would buy a null where a fast wrong answer
    # gets 0. 60 s answers a request starved by others well inside the client's 120 s timeout.
    request_budget_s: float = Field(
        60.0, ge=0, description="Seconds a request's items may wait while other callers' items "
        "hold every worker; items still waiting then come back 'timeout' (score null, not "
        "run). Time spent on the caller's own items does not count. 0: no budget.",
    )
    timeout_memory_s: float = Field(
        600.0, ge=0, description="Seconds an item that timed out is remembered, so copies of "
        "it come back 'timeout' without running again. Only a timeout load cannot cause (a "
        "math check that used its limit in CPU time) is believed at once; any other on its "
        "second occurrence. 0: off.",
    )

    plugins: list[str] = Field(
        default_factory=list,
        description="Extra verifier classes as 'module:Class', besides installed entry points.",
    )

    def resolved_math_workers(self) -> int:
        return self.math_workers or os.cpu_count() or 1


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once; tests pass their own Settings to create_app."""
    return Settings()
