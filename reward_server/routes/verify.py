"""``POST /v1/verify/<name>``, one route per registered verifier, built from its schemas.

The body is read here, not by FastAPI: FastAPI would refuse the whole batch for one item
that fails the verifier's schema, and each item is admitted on its own instead
(reward_server/admission.py). The OpenAPI page still shows the verifier's own item schema.
It is parsed and validated on a worker thread, and the answer rendered on one
(``json_response``): up to 64 MB of completions either way.

(No ``from __future__ import annotations`` here: FastAPI reads the parameter types from the
endpoint's annotations.)"""

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from reward_server.admission import OnInvalidQuery
from reward_server.json_body import body_schema, read_body, validated
from reward_server.json_render import json_response
from reward_server.routes import caller_of
from reward_server.schemas import verify_models
from reward_server.verifiers.base import Verifier


class RawBatch(BaseModel):
    items: list[Any]


def verifier_router(name: str, cls: type[Verifier]) -> APIRouter:
    request_model, response_model = verify_models(name, cls.item_model, cls.result_model,
                                                  cls.checks())
    path = f"/v1/verify/{name}"
    router = APIRouter()

    async def endpoint(request: Request, on_invalid: OnInvalidQuery = "null") -> Response:
        raw = await read_body(request)
        body = await asyncio.to_thread(validated, RawBatch, raw)
        results = await request.app.state.scorer.verify(  # type: ignore[attr-defined]
            name, body.items, caller_of(request), on_invalid, len(raw))
        provenance = request.app.state.provenance.of_verifier(name, results)
        return await json_response(lambda: response_model(results=results,
                                                          provenance=provenance))

    router.add_api_route(
        path, endpoint, methods=["POST"], response_model=response_model,
        summary=f"Score a batch with the {name} verifier",
        description=cls.description or None, tags=["verify"],
        openapi_extra=body_schema(path, request_model),
    )
    return router

