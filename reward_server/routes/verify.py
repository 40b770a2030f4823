"""``POST /v1/verify/<name>``, one route per registered verifier, built from its schemas.

The body is read here, not by FastAPI: FastAPI would refuse the whole batch for one item
that fails the verifier's schema, and each item is admitted on its own instead
(reward_server/admission.py). The OpenAPI page still shows the verifier's own item schema.

(No ``from __future__ import annotations`` here: FastAPI reads the parameter types from the
endpoint's annotations.)"""

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from reward_server.admission import OnInvalidQuery
from reward_server.json_body import as_model, body_schema, loads, read_body
from reward_server.routes import caller_of
from reward_server.schemas import verify_models
from reward_server.verifiers.base import Verifier


class RawBatch(BaseModel):
    items: list[Any]


def parse_body(raw: bytes) -> RawBatch:
    """The body as FastAPI reads one (``json.loads``, then the model), its errors as a 422."""
    return as_model(RawBatch, loads(raw))


def verifier_router(name: str, cls: type[Verifier]) -> APIRouter:
    request_model, response_model = verify_models(name, cls.item_model, cls.result_model,
                                                  cls.checks())
    path = f"/v1/verify/{name}"
    router = APIRouter()

    async def endpoint(request: Request, on_invalid: OnInvalidQuery = "null") -> Response:
        raw = await read_body(request)
        results = await request.app.state.scorer.verify(  # type: ignore[attr-defined]
            name, parse_body(raw).items, caller_of(request), on_invalid, len(raw))
        payload = response_model(results=results,
                                 provenance=request.app.state.provenance.of_verifier(
                                     name, results))
        return Response(payload.model_dump_json(), media_type="application/json")

    router.add_api_route(
        path, endpoint, methods=["POST"], response_model=response_model,
        summary=f"Score a batch with the {name} verifier",
        description=cls.description or None, tags=["verify"],
        openapi_extra=body_schema(path, request_model),
    )
    return router

