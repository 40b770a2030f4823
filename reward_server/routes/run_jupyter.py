"""``POST /run_jupyter``: SandboxFusion's notebook endpoint (docs/run_code.md), whose client
package's ``run_jupyter`` posts here with only its endpoint changed.

The body is read and validated off the event loop (``json_body``): megabytes of files.

(No ``from __future__ import annotations`` here: FastAPI reads the parameter types from the
endpoint's annotations.)"""

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from reward_server.json_body import body_schema, json_body
from reward_server.json_render import json_response
from reward_server.routes import caller_of
from reward_server.run_code.jupyter import run_jupyter
from reward_server.run_code.jupyter_schemas import RunJupyterRequest, RunJupyterResponse

router = APIRouter()


@router.post("/run_jupyter", response_model=RunJupyterResponse, tags=["sandbox"],
             summary="Run cells in one fresh interpreter (SandboxFusion's run_jupyter)",
             responses={429: {"description": "The caller's or the server's session cap (each "
                                             "run holds a session's container); Retry-After"},
                        503: {"model": RunJupyterResponse, "description": "SandboxError: the "
                              "sandbox failed, or no container could be had"}},
             openapi_extra=body_schema("/run_jupyter", RunJupyterRequest))
async def run_jupyter_route(
        body: Annotated[RunJupyterRequest, Depends(json_body(RunJupyterRequest))],
        request: Request) -> Response:
    status, response = await run_jupyter(request.app.state.sessions, caller_of(request), body)
    if response.provenance is None:  # no container ran it: what would have
        response.provenance = request.app.state.provenance.sandbox()
    # rendered off the event loop, a piece at a time: up to the answer limit of the cells'
    # output and files
    return await json_response(lambda: response, status)
