"""``POST /v1/rewards``: one call scores a mixed batch, as a trainer sends it.

The body is read and validated off the event loop (``json_body``): up to 64 MB of
completions; the answer is built and rendered off it too (``json_response``).

(No ``from __future__ import annotations`` here: FastAPI reads the parameter types from the
endpoint's annotations.)"""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from reward_server.admission import OnInvalidQuery
from reward_server.json_body import body_schema, json_body
from reward_server.json_render import json_response
from reward_server.routes import body_bytes, caller_of
from reward_server.schemas import RewardsRequest, RewardsResponse

router = APIRouter()


@router.post("/v1/rewards", response_model=RewardsResponse, tags=["verify"],
             openapi_extra=body_schema("/v1/rewards", RewardsRequest))
async def rewards(request: Request,
                  body: Annotated[RewardsRequest, Depends(json_body(RewardsRequest))],
                  on_invalid: OnInvalidQuery = "null") -> Response:
    scored = await request.app.state.scorer.score_mixed(body.items, caller_of(request),
                                                        on_invalid, body_bytes(request))
    provenance = request.app.state.provenance.of(scored)
    return await json_response(lambda: RewardsResponse(
        rewards=[result.score for _, result in scored],
        results=[{"verifier": name, **result.model_dump()} for name, result in scored],
        provenance=provenance,
    ))
