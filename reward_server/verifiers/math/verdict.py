"""What a comparison concludes, wherever it ran (the fast path or a pool worker)."""

from __future__ import annotations

from typing import Literal, NamedTuple

VerdictStatus = Literal["ok", "parse_error", "no_answer"]


class Verdict(NamedTuple):
    correct: bool
    status: VerdictStatus
    detail: str | None
    extracted: str | None = None  # what the worker read, when extraction happened there
