"""``/v1/sessions``: stateful interpreter sessions for multi-step tool use (docs/sessions.md).
Create one, run cells in it (variables kept between calls), close it. Bodies are read and
validated off the event loop (``json_body``): a create's files are megabytes.

(No ``from __future__ import annotations`` here: FastAPI reads the parameter types from the
endpoints' annotations.)"""

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from reward_server.json_body import body_schema, json_body
from reward_server.json_render import json_response
from reward_server.routes import caller_of
from reward_server.run_code.session_schemas import (
    CreateSessionRequest,
    RunCellsRequest,
    RunCellsResponse,
    SessionInfo,
)
from reward_server.run_code.sessions import Sessions

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
_ERRORS = {404: {"description": "No such session, or another caller's"},
           410: {"description": "The caller's session has ended (closed, expired, lost)"}}


def _sessions(request: Request) -> Sessions:
    return request.app.state.sessions


@router.post("", status_code=201, response_model=SessionInfo,
             summary="Start a Python interpreter whose state outlives each cell",
             responses={429: {"description": "The caller's or the server's session cap; "
                                         "Retry-After says when one may free"},
                        503: {"description": "No sandbox container could be had"}},
             openapi_extra=body_schema("/v1/sessions", CreateSessionRequest))
async def create_session(
        body: Annotated[CreateSessionRequest, Depends(json_body(CreateSessionRequest))],
        request: Request) -> SessionInfo:
    return await _sessions(request).create(caller_of(request), body)


@router.get("", response_model=list[SessionInfo], summary="The caller's open sessions")
async def list_sessions(request: Request) -> list[SessionInfo]:
    return _sessions(request).of_caller(caller_of(request))


@router.get("/{session_id}", response_model=SessionInfo, responses=_ERRORS,
            summary="One session's state")
async def get_session(session_id: str, request: Request) -> SessionInfo:
    return _sessions(request).info(caller_of(request), session_id)


@router.post("/{session_id}/run", response_model=RunCellsResponse,
             summary="Run one cell (code) or several (cells) in the session",
             responses={**_ERRORS, 503: {"model": RunCellsResponse,
                                         "description": "SandboxError: the sandbox failed"}},
             openapi_extra=body_schema("/v1/sessions/{session_id}/run", RunCellsRequest))
async def run_cells(session_id: str,
                    body: Annotated[RunCellsRequest, Depends(json_body(RunCellsRequest))],
                    request: Request) -> Response:
    status, response = await _sessions(request).run(caller_of(request), session_id, body)
    # rendered off the event loop, a piece at a time: up to the answer limit of the cells' output
    return await json_response(lambda: response, status)


@router.delete("/{session_id}", response_model=SessionInfo, responses=_ERRORS,
               summary="Close the session and remove its container")
async def close_session(session_id: str, request: Request) -> SessionInfo:
    return await _sessions(request).close(caller_of(request), session_id)
