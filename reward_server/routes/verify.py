"""``POST /v1/verify/<name>``, one route per registered verifier, built from its schemas.

(No ``from __future__ import annotations`` here: FastAPI reads the body type from the
endpoint's annotation, which must be the per-verifier model object itself.)"""

from fastapi import APIRouter, Request, Response

from reward_server.routes import caller_of
from reward_server.schemas import verify_models
from reward_server.verifiers.base import Verifier


def verifier_router(name: str, cls: type[Verifier]) -> APIRouter:
    request_model, response_model = verify_models(name, cls.item_model, cls.result_model)
    router = APIRouter()

    async def endpoint(request: Request, body: request_model) -> Response:  # type: ignore[valid-type]
        results = await request.app.state.scorer.verify(  # type: ignore[attr-defined]
            name, body.items, caller_of(request))
        payload = response_model(results=results)
        return Response(payload.model_dump_json(), media_type="application/json")

    router.add_api_route(
        f"/v1/verify/{name}", endpoint, methods=["POST"], response_model=response_model,
        summary=f"Score a batch with the {name} verifier",
        description=cls.description or None, tags=["verify"],
    )
    return router
