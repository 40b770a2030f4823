"""One ``run_code`` call: the request checked (sizes, language, paths: a 4xx naming the
field), the snippet run in the sandbox service's containers behind its fair gate (so a caller's
snippets share the containers with every caller's code items, by time, as items do), and the
result in SandboxFusion's shape. Not cached: a snippet's output may be meant to vary (random,
time), and it is not a verdict."""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import replace

from reward_server import metrics
from reward_server.admission import too_large_message
from reward_server.errors import InvalidItems, PayloadTooLarge, UnknownVerifier
from reward_server.fair_queue import BudgetSpent
from reward_server.run_code.languages import known_languages, run_code_language
from reward_server.run_code.schemas import (
    AppliedLimits,
    CommandRunResult,
    RunCodeRequest,
    RunCodeResponse,
)
from reward_server.run_code.statuses import command_status
from reward_server.sandbox_service import SandboxService
from reward_server.scoring import Scorer
from reward_server.settings import ServerSettings
from sandbox.caller_files import paths_problem
from sandbox.config import SandboxConfig, capped
from sandbox.errors import SandboxUnavailable
from sandbox.harness.paths import shown
from sandbox.harness.statuses import MEMORY_LIMIT, OUTPUT_LIMIT, TIMEOUT
from sandbox.snippets import (
    DEFAULT_COMPILE_TIMEOUT_S,
    EXITED,
    Command,
    Snippet,
    SnippetResult,
    run_snippet,
)

METRICS_NAME = "run_code"  # the verifier label of its items in /metrics
SANDBOX_ERROR = "SandboxError"


async def snippet_of(request: RunCodeRequest, settings: ServerSettings) -> Snippet:
    """The snippet a request asks for; PayloadTooLarge or InvalidItems naming the field."""
    limit = settings.max_field_bytes
    fields = [("code", request.code), ("stdin", request.stdin or "")]
    fields += [(f"files[{shown(name)}]", data or "") for name, data in request.files.items()]
    for path, value in fields:
        if len(value) * 4 > limit and (size := len(value.encode("utf-8", "replace"))) > limit:
            raise PayloadTooLarge(too_large_message(path, size, limit))
    spec = run_code_language(request.language)
    if spec is None:
        raise InvalidItems(f"language: unknown language {request.language[:100]!r}; known "
                           f"languages: {known_languages()}")
    files = {name: data for name, data in request.files.items() if data is not None}
    fetch = tuple(request.fetch_files)
    why = await paths_problem(files, fetch, spec.source)
    if why is not None:
        raise InvalidItems(why)
    return Snippet(spec, request.code, request.stdin or "", files, fetch,
                   run_timeout_s=request.run_timeout, compile_timeout_s=request.compile_timeout,
                   memory_mb=request.memory_limit_MB if request.memory_limit_MB > 0 else None)


async def run_code(scorer: Scorer, sandbox: SandboxService | None, request: RunCodeRequest,
                   caller: Hashable) -> tuple[int, RunCodeResponse]:
    """The HTTP status and the answer: 200 with Success or Failed for whatever the program
    did; 503 with SandboxError when it could not run (no container, or its request's budget
    spent waiting for one: nothing the program did)."""
    started = time.perf_counter()
    snippet = await snippet_of(request, scorer.settings)
    if sandbox is None:
        raise UnknownVerifier("/run_code runs in the code verifier's sandbox, which this "
                              "server does not load (its plugins setting)")
    if (hold := sandbox.unsplit_hold_s) is not None:
        snippet = within(snippet, hold, sandbox.config)
    try:
        with scorer.request(caller, 1):
            async with sandbox.unsplit_slot():
                result = await run_snippet(sandbox.sandbox, snippet)
    except (SandboxUnavailable, BudgetSpent) as exc:
        metrics.count_items(METRICS_NAME, SANDBOX_ERROR)
        return 503, RunCodeResponse(status=SANDBOX_ERROR, message=str(exc))
    response = response_of(result)
    if any(c is not None and c.status == "TimeLimitExceeded"
           for c in (response.compile_result, response.run_result)):
        metrics.TIMEOUTS.labels(METRICS_NAME).inc()
    metrics.count_items(METRICS_NAME, response.status)
    metrics.ITEM_LATENCY.labels(METRICS_NAME).observe(time.perf_counter() - started)
    return 200, response


def response_of(result: SnippetResult) -> RunCodeResponse:
    """SandboxFusion's answer: Success only when every command ran to its own end with exit
    code 0 and the run's stdout came back whole; what stopped a command, what the response
    limit cut, and files not fetched, go into ``message``."""
    notes = [note for note in (_stopped("compile", result.compile, result),
                               _stopped("run", result.run, result), result.note) if note]
    notes += [f"{_field(name)}: cut to its first bytes at the response limit of "
              f"{result.limits.response_limit_bytes} bytes ({size} bytes)"
              for name, size in result.cut.items() if not name.startswith("files/")]
    notes += [f"fetch_files {shown(name)}: {why}" for name, why in result.missing.items()]
    commands = [c for c in (result.compile, result.run) if c is not None]
    # a stdout the answer cannot hold whole is no program's output to judge
    ok = (result.run is not None and all(c.ended == EXITED and c.code == 0 for c in commands)
          and "run.stdout" not in result.cut)
    limits = result.limits
    response = RunCodeResponse(
        status="Success" if ok else "Failed", message="; ".join(dict.fromkeys(notes)),
        compile_result=_as_sandbox_fusion(result.compile),
        run_result=_as_sandbox_fusion(result.run), files=result.files,
        limits=AppliedLimits(compile_timeout=limits.compile_timeout_s,
                             run_timeout=limits.run_timeout_s,
                             memory_limit_MB=limits.memory_mb,
                             output_limit_bytes=limits.output_limit_bytes,
                             response_limit_bytes=limits.response_limit_bytes),
        cut={_field(name): size for name, size in result.cut.items()})
    response._ran_in = (result.image_id, result.runtime)  # noqa: SLF001 - its own answer
    return response


def _field(name: str) -> str:
    """A stream's name in the snippet (``run.stdout``) as the answer's (``run_result.stdout``)."""
    step, dot, stream = name.partition(".")
    return f"{step}_result.{stream}" if dot and step in ("compile", "run") else name


def _as_sandbox_fusion(command: Command | None) -> CommandRunResult | None:
    if command is None:
        return None
    return CommandRunResult(
        status=command_status(command),
        execution_time=round(command.time_s, 6), return_code=command.code,
        stdout=command.stdout, stderr=command.stderr)


def _stopped(step: str, command: Command | None, result: SnippetResult) -> str | None:
    """Which limit stopped a command, in words."""
    if command is None or command.ended == EXITED:
        return None
    limits = result.limits
    return {
        TIMEOUT: f"{step}: stopped at the time limit of "
                 f"{limits.compile_timeout_s if step == 'compile' else limits.run_timeout_s:g} s",
        MEMORY_LIMIT: f"{step}: stopped at the memory limit of {limits.memory_mb} MB",
        OUTPUT_LIMIT: f"{step}: stopped at the output limit of "
                      f"{limits.output_limit_bytes} bytes (stdout or stderr)",
    }[command.ended]


def within(snippet: Snippet, hold_s: float, config: SandboxConfig) -> Snippet:
    """``snippet`` with its compile and run each at most a third of ``hold_s`` (the rest
    for its start and fetched files): the longest it may hold the gate's only slot."""
    third = hold_s / 3
    return replace(snippet,
                   run_timeout_s=capped(snippet.run_timeout_s, config.default_time_limit_s, third),
                   compile_timeout_s=capped(snippet.compile_timeout_s, DEFAULT_COMPILE_TIMEOUT_S,
                                            third))
