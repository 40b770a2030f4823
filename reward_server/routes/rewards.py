"""``POST /v1/rewards``: one call scores a mixed batch, as a trainer sends it."""

from fastapi import APIRouter, Request, Response

from reward_server.admission import OnInvalidQuery
from reward_server.routes import body_bytes, caller_of
from reward_server.schemas import RewardsRequest, RewardsResponse

router = APIRouter()


@router.post("/v1/rewards", response_model=RewardsResponse, tags=["verify"])
async def rewards(request: Request, body: RewardsRequest,
                  on_invalid: OnInvalidQuery = "null") -> Response:
    scored = await request.app.state.scorer.score_mixed(body.items, caller_of(request),
                                                        on_invalid, body_bytes(request))
    payload = RewardsResponse(
        rewards=[result.score for _, result in scored],
        results=[{"verifier": name, **result.model_dump()} for name, result in scored],
        provenance=request.app.state.provenance.of(scored),
    )
    return Response(payload.model_dump_json(), media_type="application/json")
