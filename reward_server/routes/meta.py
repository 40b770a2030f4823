"""Health, metrics and the list of verifiers."""

import os
import socket

from fastapi import APIRouter, Request, Response

from reward_server import metrics
from reward_server.schemas import Health, VerifierInfo, VerifiersResponse

router = APIRouter()


@router.get("/healthz", response_model=Health, tags=["meta"])
async def healthz(request: Request) -> Health:
    """Liveness: answers while verifiers are busy (CPU work runs in other processes)."""
    return Health(verifiers=sorted(request.app.state.scorer.verifiers),
                  instance=f"{socket.gethostname()}:{os.getpid()}")


@router.get("/metrics", tags=["meta"], response_class=Response)
async def prometheus_metrics() -> Response:
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)


@router.get("/v1/verifiers", response_model=VerifiersResponse, tags=["meta"])
async def list_verifiers(request: Request) -> VerifiersResponse:
    verifiers = request.app.state.scorer.verifiers
    blocks = request.app.state.provenance.current()
    return VerifiersResponse(verifiers=[
        VerifierInfo(
            name=name, description=v.description, endpoint=f"/v1/verify/{name}",
            item_schema=v.item_model.model_json_schema(),
            result_schema=v.result_model.model_json_schema(),
            provenance=blocks.get(name),
        )
        for name, v in sorted(verifiers.items())
    ])
