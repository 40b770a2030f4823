"""``POST /run_code``: SandboxFusion's endpoint (docs/run_code.md). veRL's ``sandbox_fusion``
reward posts here with only its URL changed.

The body is read and validated off the event loop (``json_body``): megabytes of files.

(No ``from __future__ import annotations`` here: FastAPI reads the parameter types from the
endpoint's annotations.)"""

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from reward_server.json_body import body_schema, json_body
from reward_server.json_render import json_response
from reward_server.routes import caller_of
from reward_server.run_code.schemas import RunCodeRequest, RunCodeResponse
from reward_server.run_code.service import run_code

router = APIRouter()


@router.post("/run_code", response_model=RunCodeResponse, tags=["sandbox"],
             summary="Run a program once (SandboxFusion's run_code)",
             responses={503: {"model": RunCodeResponse, "description": "SandboxError: no "
                              "container could run it"}},
             openapi_extra=body_schema("/run_code", RunCodeRequest))
async def run_code_route(body: Annotated[RunCodeRequest, Depends(json_body(RunCodeRequest))],
                         request: Request) -> Response:
    state = request.app.state
    status, response = await run_code(state.scorer, state.sandbox, body, caller_of(request))
    response.provenance = state.provenance.sandbox(response._ran_in)  # noqa: SLF001
    # rendered off the event loop, a piece at a time: up to the response limit of a program's output
    return await json_response(lambda: response, status)
