"""An example verifier plug-in: the response's last non-empty line must equal the answer.

Installed with ``pip install ./examples/exact_match_verifier``, it adds
``POST /v1/verify/exact_match`` and ``{"verifier": "exact_match", ...}`` items in
``/v1/rewards``, with no change to the server."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from reward_server.verifiers import ItemBase, ResultBase, Verifier


class ExactMatchItem(ItemBase):
    response: str
    answer: str
    case_sensitive: bool = Field(False, description="Compare letter case too.")


class ExactMatchResult(ResultBase):
    score: float
    status: Literal["ok", "empty"]
    matched: bool


class ExactMatchVerifier(Verifier):
    name = "exact_match"
    item_model = ExactMatchItem
    result_model = ExactMatchResult
    description = "The last non-empty line of the response equals the answer."

    async def verify(self, items: Sequence[ExactMatchItem]) -> list[ExactMatchResult]:  # type: ignore[override]
        return [self._one(item) for item in items]

    @staticmethod
    def _one(item: ExactMatchItem) -> ExactMatchResult:
        lines = [line.strip() for line in item.response.splitlines() if line.strip()]
        if not lines:
            return ExactMatchResult(score=0.0, status="empty", matched=False)
        last, answer = lines[-1], item.answer.strip()
        if not item.case_sensitive:
            last, answer = last.casefold(), answer.casefold()
        return ExactMatchResult(score=float(last == answer), status="ok", matched=last == answer)
