"""An example verifier plug-in: the response's last non-empty line must equal the answer.

Installed with ``pip install ./examples/exact_match_verifier``, it adds
``POST /v1/verify/exact_match`` and ``{"verifier": "exact_match", ...}`` items in
``/v1/rewards``, with no change to the server. It supplies ``check`` only: the server runs it
in worker processes under its time and memory limits, caches verdicts, shares the workers
fairly between callers and counts its items on ``/metrics``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from reward_server.verifiers import ItemBase, ResultBase, Verifier


class ExactMatchSettings(BaseModel):
    """This plug-in's settings section: ``--exact-match-case-sensitive`` or
    ``REWARD_SERVER_EXACT_MATCH_CASE_SENSITIVE``, listed by ``reward-server --help``."""

    case_sensitive: bool = Field(False, description="Compare letter case when an item "
                                 "does not say.")


class ExactMatchItem(ItemBase):
    response: str
    answer: str
    case_sensitive: bool | None = Field(None, description="Compare letter case too; "
                                        "default: the server's setting.")


class ExactMatchResult(ResultBase):
    score: float
    status: Literal["ok", "empty"]
    matched: bool


class ExactMatchVerifier(Verifier):
    name = "exact_match"
    item_model = ExactMatchItem
    result_model = ExactMatchResult
    description = "The last non-empty line of the response equals the answer."
    settings_model = ExactMatchSettings
    config: ExactMatchSettings

    check_timeout_s = 2.0  # a line comparison: anything slower is the response's doing

    def check(self, item: ExactMatchItem) -> ExactMatchResult:  # type: ignore[override]
        lines = [line.strip() for line in item.response.splitlines() if line.strip()]
        if not lines:
            return ExactMatchResult(score=0.0, status="empty", matched=False)
        last, answer = lines[-1], item.answer.strip()
        case_sensitive = (self.config.case_sensitive if item.case_sensitive is None
                          else item.case_sensitive)
        if not case_sensitive:
            last, answer = last.casefold(), answer.casefold()
        return ExactMatchResult(score=float(last == answer), status="ok", matched=last == answer)
