"""One ``run_jupyter`` call: SandboxFusion's notebook run on the session machinery. The
request is checked first (sizes, paths: a 4xx naming the field); then a transient session (a
fresh interpreter in a container of its own, admitted against the same caps as
``/v1/sessions``) runs the cells in order, each through the sandbox service's fair gate as a
session's cell does, the files are read back, and the container is removed whatever happened.

Why a session and not a ``/run_code`` snippet: the cells share one interpreter's state, and a
cell's value and exception come back as Jupyter's outputs, which is what the session kernel
(``sandbox/harness/kernel.py``) already does under every limit a session has."""

from __future__ import annotations

import asyncio
import time

from reward_server import metrics
from reward_server.callers import Caller
from reward_server.errors import InvalidItems, SessionsUnavailable
from reward_server.run_code.cell_answer import answer_bytes
from reward_server.run_code.jupyter_schemas import (
    JupyterLimits,
    RunJupyterRequest,
    RunJupyterResponse,
)
from reward_server.run_code.schemas import CommandRunResult, CommandRunStatus
from reward_server.run_code.session_schemas import RunCellsResponse
from reward_server.run_code.sessions import SANDBOX_ERROR, Sessions
from sandbox.caller_files import paths_problem
from sandbox.config import capped
from sandbox.harness.paths import shown

METRICS_NAME = "run_jupyter"  # the verifier label of its runs in /metrics


async def run_jupyter(sessions: Sessions, caller: Caller, request: RunJupyterRequest
                      ) -> tuple[int, RunJupyterResponse]:
    """The HTTP status and the answer: 200 with Success or Failed for whatever the cells did;
    503 with SandboxError when the sandbox failed under them or had no container for them."""
    why = await paths_problem({}, tuple(request.fetch_files), "")
    if why is not None:
        raise InvalidItems(why)
    sandbox = sessions.enabled()
    sessions.check_sizes([(f"cells[{i}]", code) for i, code in enumerate(request.cells)])
    started = time.perf_counter()
    total = min(request.total_timeout, sandbox.settings.session_max_total_timeout_s)
    answer_limit = sandbox.config.snippet_response_limit_bytes
    try:
        async with sessions.transient(caller, request.memory_limit_MB, request.files) as session:
            status, ran = await sessions.run_transient(session, request.cells,
                                                       request.cell_timeout, total)
            files: dict[str, str] = {}
            notes = [ran.message] if ran.message else []
            if status == 200 and request.fetch_files:
                answer = await asyncio.to_thread(answer_bytes, ran.cells)  # megabytes
                fetched = await sessions.fetch(session, list(request.fetch_files),
                                               answer_limit - answer)
                files = fetched.files
                notes += [f"fetch_files {shown(name)}: {reason}"
                          for name, reason in fetched.missing.items()]
    except SessionsUnavailable as exc:  # no container for it: nothing the cells did
        metrics.count_items(METRICS_NAME, SANDBOX_ERROR)
        return 503, RunJupyterResponse(status=SANDBOX_ERROR, message=exc.message)
    limits = session.limits
    elapsed = time.perf_counter() - started
    response = RunJupyterResponse(
        status=ran.status, message="; ".join(notes), driver=_driver(ran, elapsed),
        cells=ran.cells, files=files, provenance=ran.provenance,
        limits=JupyterLimits(
            cell_timeout=min(capped(request.cell_timeout or None, limits.cell_timeout,
                                    limits.max_cell_timeout), total),
            total_timeout=total, memory_limit_MB=limits.memory_limit_MB,
            output_limit_bytes=limits.output_limit_bytes, response_limit_bytes=answer_limit))
    metrics.count_items(METRICS_NAME, response.status)
    metrics.ITEM_LATENCY.labels(METRICS_NAME).observe(elapsed)
    return status, response


def _driver(ran: RunCellsResponse, elapsed: float) -> CommandRunResult:
    """SandboxFusion's driver process, which we do not have: the run as a whole."""
    status: CommandRunStatus = "Finished"
    if ran.status != "Success":
        last = ran.cells[-1].status if ran.cells else "Error"
        status = "TimeLimitExceeded" if last == "TimeLimitExceeded" or \
            "total_timeout" in ran.message else "Error"
    return CommandRunResult(status=status, execution_time=round(elapsed, 6),
                            return_code=0 if status == "Finished" else None, stdout="",
                            stderr="")
