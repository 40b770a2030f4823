"""The format verifier's settings section: ``--format-<field>`` /
``REWARD_SERVER_FORMAT_<FIELD>`` (composed into the server's settings)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FormatSettings(BaseModel):
    # Only a caller's own ``regex`` runs in a worker (the built-in rules are linear and run in
    # the server); one worker searches thousands of honest patterns a second.
    workers: int = Field(1, ge=1, description="Worker processes for caller-given regexes.")
    # An honest pattern searches 1 MiB in milliseconds; only backtracking takes longer
    timeout_s: float = Field(1.0, gt=0, description="Wall-clock limit for one hand-off of "
                             "regex searches to a worker (up to chunk_items of them); past it "
                             "each search of the hand-off runs alone under this limit, and one "
                             "that runs out of time fails its rule (timeout, 0).")
    memory_mb: int = Field(512, ge=128, description="Address space a worker may add to what "
                           "it was forked with (its cap).")
    chunk_items: int = Field(256, ge=1, le=4096, description="Regex searches handed to a "
                             "worker at once.")
    # Caps, each answered with the item's invalid_item (a 422 with on_invalid=error) naming
    # the field. open-r1 and TRL recipes hold 1 to 4 rules, their patterns under 100
    # characters; each rule is a scan of the text, each regex a compile and a search.
    max_rules: int = Field(16, ge=1, le=256, description="Rules in one item.")
    max_pattern_chars: int = Field(1000, ge=1, le=100_000, description="Characters in one "
                                   "final_answer regex (compiled and searched in a worker "
                                   "under timeout_s).")
