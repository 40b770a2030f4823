"""``POST /get_reward``: OpenRLHF's remote reward-model protocol.

    openrlhf.cli.train_ppo_ray ... --remote_rm_url http://reward:8000/get_reward \
        --label_key answer

OpenRLHF sends ``{"query": [...], "prompts": [...], "labels": [...]}``, where a query is
the prompt followed by the response, decoded with special tokens, and a label is the
dataset's ``label_key`` column as a string. We score ``query`` minus its ``prompt`` prefix.
The verifier is ``?verifier=`` (default math) unless a label is a JSON object naming one; a
JSON object label gives item fields (``{"tests": [...]}``, ``{"answer": "3", "extract":
"last_number"}``), a JSON list is a code item's tests, and any other label is the answer.

The answer is ``{"rewards": [...], "scores": [...], "extra_logs": {...}}``, one entry per
query; ``extra_logs`` holds per-query lists (``correct``, ``unscorable``) that OpenRLHF
averages into its logs. An item that could not be scored (sandbox unavailable) makes the
whole call a 503, which OpenRLHF retries, unless ``?on_unscorable=zero`` asks for 0. A
query whose label is not a valid item (a missing field, a test in a shape the verifier does
not take) makes the call a 422 naming the query, which OpenRLHF does not retry: a reward
list has no null, and a bad label scored 0 would train on a made-up reward. Set
``?on_invalid=zero`` to score such queries 0 instead, counted in ``extra_logs["invalid"]``.

The body is read and validated off the event loop (``json_body``): a batch of decoded
prompts and responses is megabytes; the answer is rendered off it (``json_response``).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field, model_validator

from reward_server.adapters.items import label_fields
from reward_server.admission import INVALID_ITEM
from reward_server.errors import InvalidItems, SandboxUnavailableError
from reward_server.json_body import body_schema, json_body
from reward_server.json_render import json_response
from reward_server.provenance import Provenance
from reward_server.routes import body_bytes, caller_of

router = APIRouter()


class OpenRLHFRequest(BaseModel):
    query: list[str] = Field(description="Prompt + response per sample, as decoded.")
    prompts: list[str] | None = Field(None, description="The prompt of each query.")
    labels: list[Any] | None = Field(None, description="The label_key column per query.")

    @model_validator(mode="after")
    def _same_lengths(self) -> OpenRLHFRequest:
        for name in ("prompts", "labels"):
            values = getattr(self, name)
            if values is not None and len(values) != len(self.query):
                raise ValueError(f"{name} has {len(values)} entries but query has "
                                 f"{len(self.query)}")
        return self


class OpenRLHFResponse(BaseModel):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]]  # OpenRLHF makes a tensor of each: numbers only
    # OpenRLHF reads the three keys above and leaves the rest
    provenance: dict[str, Provenance] = Field(default_factory=dict)


def response_of(query: str, prompt: str | None) -> str:
    if prompt and query.startswith(prompt):
        return query[len(prompt):]
    return query


def item_of(query: str, prompt: str | None, label: Any, verifier: str) -> dict[str, Any]:
    item = {"verifier": verifier, "response": response_of(query, prompt), **label_fields(label)}
    if prompt and item["verifier"] == "math" and "question" not in item:
        item["question"] = prompt  # a copied question's expression scores 0
    return item


def items_of(body: OpenRLHFRequest, verifier: str, on_invalid: str) -> list[dict[str, Any]]:
    """An item per query; a label no item takes is a 422 naming it, or (``on_invalid=zero``)
    an item refused as invalid."""
    n = len(body.query)
    prompts = body.prompts or [None] * n
    labels = body.labels or [None] * n
    items: list[dict[str, Any]] = []
    for i, (q, p, lab) in enumerate(zip(body.query, prompts, labels, strict=True)):
        try:
            items.append(item_of(q, p, lab, verifier))
        except ValueError as exc:  # a label in a shape no item takes (input_output)
            if on_invalid == "error":
                raise InvalidItems(f"labels[{i}]: {exc}") from None
            items.append({"verifier": verifier, "label_error": str(exc)})  # refused below
    return items


@router.post("/get_reward", response_model=OpenRLHFResponse, tags=["adapters"],
             openapi_extra=body_schema("/get_reward", OpenRLHFRequest))
async def get_reward(request: Request,
                     body: Annotated[OpenRLHFRequest, Depends(json_body(OpenRLHFRequest))],
                     verifier: str = Query("math", description="Verifier for every query."),
                     on_unscorable: Literal["error", "zero"] = Query(
                         "error", description="An unscorable item: 503 (OpenRLHF retries) "
                         "or a reward of 0."),
                     on_invalid: Literal["error", "zero"] = Query(
                         "error", description="A query whose label is not a valid item: "
                         "422 naming it, or a reward of 0.")) -> Response:
    request.app.state.scorer.get(verifier)  # a 404 naming the verifiers there are
    n = len(body.query)
    items = await asyncio.to_thread(items_of, body, verifier, on_invalid)  # labels' JSON
    # each item admitted on its own even for a 422: a response over the size limit is that
    # query's 0 (response_too_long), not a 413 that costs every query of the call
    scored = await request.app.state.scorer.score_mixed(items, caller_of(request), "null",
                                                        body_bytes(request))
    invalid = [result.status == INVALID_ITEM for _, result in scored]
    if any(invalid) and on_invalid == "error":  # in OpenRLHF's terms: queries, not items
        details = [r.detail or "" for (_, r), bad in zip(scored, invalid, strict=True) if bad]
        raise InvalidItems("; ".join(details).replace("items[", "query["))
    rewards = [0.0 if bad else result.score for (_, result), bad in zip(scored, invalid,
                                                                         strict=True)]
    unscorable = [score is None for score in rewards]
    if any(unscorable) and on_unscorable == "error":
        first = next(r for (_, r), u in zip(scored, unscorable, strict=True) if u)
        raise SandboxUnavailableError(
            f"{sum(unscorable)} of {n} queries could not be scored ({first.status}: "
            f"{first.detail}); retry later, or pass ?on_unscorable=zero")
    values = [0.0 if s is None else float(s) for s in rewards]
    correct = [float(getattr(r, "correct", s is not None and s >= 1.0))
               for (_, r), s in zip(scored, rewards, strict=True)]
    provenance = request.app.state.provenance.of(scored)
    return await json_response(lambda: OpenRLHFResponse(
        rewards=values, scores=values,
        extra_logs={"correct": correct, "unscorable": [float(u) for u in unscorable],
                    "invalid": [float(b) for b in invalid]},
        provenance=provenance))
