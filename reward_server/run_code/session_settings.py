"""The settings of stateful sessions (``/v1/sessions``, docs/sessions.md): part of the
sandbox's section (``--sandbox-session-*``, ``REWARD_SERVER_SANDBOX_SESSION_*``), since a
session runs in its sandbox. Pydantic only: ``reward_server.sandbox_settings`` imports it."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SessionSettings(BaseModel):
    # Each open session holds a container of its own beside the warm pool (pool_size per
    # engine): this bounds the containers, memory and CPUs sessions can take all together.
    session_max_open: int = Field(16, ge=0, description="Sessions open at once on this server "
                                  "(each holds a sandbox container of its own); 0 turns "
                                  "sessions off. Past it: 429.")
    # A trainer runs one session per rollout in flight; a handful per caller keeps one
    # caller from taking every container while it runs a batch.
    session_max_per_caller: int = Field(4, ge=1, description="Sessions one caller may hold "
                                        "open at once: one token's name, or without tokens "
                                        "one client host (every loopback address counts as "
                                        "one, an IPv6 address as its /64). Past it: 429.")
    # The cap alone lets session_max_open / session_max_per_caller callers fill the server;
    # keeping the last places for first sessions takes that many more, each with none yet.
    session_reserve: int = Field(4, ge=0, description="Of session_max_open, places kept for "
                                 "callers that hold no session: a caller's second and later "
                                 "sessions are refused (429) once this few are free, so "
                                 "callers already served cannot shut a new one out. At most "
                                 "session_max_open - session_max_per_caller is kept.")
    # A rollout's turns come seconds apart; five minutes of silence is a caller that went away
    # (crashed, or forgot DELETE): its container is freed for the next.
    session_idle_ttl_s: float = Field(300.0, gt=0, le=86400, description="A session with no "
                                      "cell for this long is closed and its container "
                                      "removed; a session may ask for less (idle_ttl_s).")
    session_cell_timeout_s: float = Field(10.0, gt=0, description="A cell's wall-clock limit "
                                          "when its request sets none (SandboxFusion's "
                                          "cell_timeout 0).")
    session_max_cell_timeout_s: float = Field(60.0, gt=0, le=600, description="The most a "
                                              "cell may ask for.")
    # A /run_jupyter request holds a container of its own for all its cells: SandboxFusion's
    # default total_timeout is 45 s, and two minutes leaves room above it without letting 64
    # cells of a minute each hold a container for an hour.
    session_max_total_timeout_s: float = Field(120.0, gt=0, le=3600, description="The most "
                                               "a /run_jupyter request's cells may run in "
                                               "all (its total_timeout is capped by it).")
    # What a model reads back after a tool call: a megabyte is far more than any context
    # window takes, and small enough that a flood costs nothing.
    session_output_limit_bytes: int = Field(1024 * 1024, ge=1024, le=16 * 1024 * 1024,
                                            description="stdout, and stderr, each, per cell "
                                            "(a displayed value too): past it the cell is "
                                            "interrupted and its output cut.")
