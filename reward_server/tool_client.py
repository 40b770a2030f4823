"""The client of the sandbox as a tool: one turn's calls run in the reward server's sandbox
together (``POST /run_code``, or a ``/v1/sessions`` interpreter per rollout), and each answer
as the text a policy reads. Our trainer's rollouts (trainer/tools.py, trainer/multiturn.py)
and TRL's tools (reward_server/adapters/trl_tools.py) both use it; it needs httpx only.

What goes back to the policy follows ToRL: stdout, and of an error only its last line (the
traceback's file paths are noise); at most ``max_chars``, the middle cut as SimpleTIR cuts it.
A call the sandbox could not run (unavailable, timed out, refused) is an error text in the
conversation too, never an exception out of a training step; ``ToolResult.outage`` says
which of those the policy did not cause.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Literal

import httpx

from reward_server.retry_after import jittered, retry_after_s

ToolState = Literal["stateless", "session"]


@dataclass(frozen=True)
class ToolCall:
    """A call the policy wrote: code to run, or (``error``) why it is no valid call."""

    code: str | None
    error: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """What a call gave back. ``failed``: the tool did not answer (sandbox unavailable, timed
    out, a malformed or refused call; TRL's tool failure); ``outage``: of those, the ones the
    policy did not cause (no sandbox, the call timed out, a server refusal such as a session
    cap): the rollout went on from an error text it did not earn, so its reward is null, not
    the verifier's verdict on it; ``program_error``: it ran and the program failed (an
    exception, a non-zero exit, its time limit) -- the policy's doing."""

    text: str
    failed: bool = False
    program_error: bool = False
    outage: bool = False


# --- the output a policy reads --------------------------------------------------------------


def clip(text: str, max_chars: int) -> str:
    """At most ``max_chars`` (plus a marker): its head and tail, as SimpleTIR keeps them."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    return f"{text[:half]}\n...({len(text) - 2 * half} characters cut)...\n{text[-half:]}"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _program_text(stdout: str, error: str) -> str:
    """stdout, then an error's last line (ToRL: ``NameError: name 'a' is not defined``)."""
    return "\n".join(part for part in (stdout.rstrip("\n"), _last_line(error)) if part)


def run_code_result(body: dict[str, Any], run_timeout_s: float) -> ToolResult:
    """A ``/run_code`` answer (SandboxFusion's RunCodeResponse) as the policy reads it."""
    run = body.get("run_result") or body.get("compile_result") or {}
    stdout, stderr = str(run.get("stdout") or ""), str(run.get("stderr") or "")
    if run.get("status") == "TimeLimitExceeded":
        return ToolResult(_program_text(stdout, f"TimeoutError: the program ran past "
                                                f"{run_timeout_s:g} s"), program_error=True)
    if body.get("status") == "Success":
        return ToolResult(stdout.rstrip("\n"))
    return ToolResult(_program_text(stdout, stderr or str(body.get("message") or "")),
                      program_error=True)


def cell_result(body: dict[str, Any]) -> ToolResult:
    """A session cell's answer: stdout, the last expression's value (as a notebook shows it),
    and an exception's last line."""
    cells = body.get("cells") or []
    if not cells:
        return ToolResult(f"Error: {body.get('message') or 'the cell did not run'}",
                          program_error=True)
    cell = cells[0]
    shown = [d.get("text/plain", "") for d in cell.get("display") or []]
    stdout = "\n".join(p for p in (str(cell.get("stdout") or "").rstrip("\n"), *shown) if p)
    errors = cell.get("error") or []
    if errors:
        raised = f"{errors[0].get('ename', 'Error')}: {errors[0].get('evalue', '')}"
        return ToolResult(_program_text(stdout, raised), program_error=True)
    if cell.get("status") != "Finished" or body.get("status") != "Success":
        return ToolResult(_program_text(stdout, str(body.get("message") or cell.get("stderr")
                                                    or "")), program_error=True)
    return ToolResult(stdout)


# Refusals of what the call itself holds (a field over the size limit, one that fails the
# schema): the policy's doing. Any other refusal (401, 404, 429, 5xx) is the server's.
POLICY_REFUSALS = frozenset({413, 422})


def unavailable(why: str) -> ToolResult:
    return ToolResult(f"Error: the code tool is unavailable ({why})", failed=True, outage=True)


def why(exc: httpx.HTTPError) -> str:
    """A failed call in a few words (the answer's message where the server gave one)."""
    if isinstance(exc, httpx.TimeoutException):
        return "the call timed out"
    if isinstance(exc, httpx.HTTPStatusError):
        detail = exc.response.text[:200]
        try:
            body = exc.response.json()
            detail = str(body.get("message") or body.get("detail") or detail)[:200]
        except ValueError:
            pass
        return f"HTTP {exc.response.status_code}: {detail}"
    return f"{type(exc).__name__}: {exc}"[:200]


# --- the client -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    """One turn's calls, run together: each result in order, and the wall-clock seconds."""

    results: list[ToolResult]
    seconds: float


class CodeTool:
    """Runs calls in the reward server's sandbox: ``stateless`` posts each to ``/run_code``
    (a fresh process and work dir per call, as ToRL and SimpleTIR run each block);
    ``session`` keeps one ``/v1/sessions`` interpreter per rollout, so a later call sees an
    earlier one's variables, and closes them at ``close_sessions``. All calls of a round are
    in flight at once (up to ``concurrency``), since a turn's rollouts wait for the slowest."""

    def __init__(self, url: str, *, state: ToolState = "stateless", token: str | None = None,
                 run_timeout_s: float = 10.0, request_timeout_s: float = 60.0,
                 max_output_chars: int = 512, concurrency: int = 64,
                 transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.state = state
        self.run_timeout_s = run_timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_output_chars = max_output_chars
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, limits=limits,
                                  timeout=request_timeout_s, transport=transport)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="code-tool")
        self._sessions: dict[int, str] = {}

    def run(self, calls: list[tuple[int, ToolCall]]) -> Round:
        """``calls``: (rollout key, call) pairs of one turn; the results in their order."""
        t0 = time.perf_counter()
        results = list(self._pool.map(lambda kc: self._one(*kc), calls))
        clipped = [replace(r, text=clip(r.text, self.max_output_chars)) for r in results]
        return Round(clipped, time.perf_counter() - t0)

    def _one(self, key: int, call: ToolCall) -> ToolResult:
        if call.code is None:
            return ToolResult(f"Error: {call.error}", failed=True)
        try:
            if self.state == "session":
                return self._cell(key, call.code)
            response = self._post("/run_code", {
                "code": call.code, "language": "python", "run_timeout": self.run_timeout_s})
            response.raise_for_status()  # 503: no sandbox; 4xx: refused -- the tool's failure
            return run_code_result(response.json(), self.run_timeout_s)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code in POLICY_REFUSALS:  # its code, too large or malformed
                return ToolResult(f"Error: the call was refused ({why(exc)})", failed=True)
            return unavailable(why(exc))
        except httpx.HTTPError as exc:
            return unavailable(why(exc))

    def _cell(self, key: int, code: str) -> ToolResult:
        session = self._sessions.get(key)
        if session is None:
            response = self._post("/v1/sessions", {"language": "python"})
            response.raise_for_status()
            session = self._sessions[key] = response.json()["session_id"]
        response = self._post(f"/v1/sessions/{session}/run",
                              {"code": code, "cell_timeout": self.run_timeout_s})
        if response.status_code in (404, 410):  # lost (its interpreter died): a fresh one next
            self._sessions.pop(key, None)
        response.raise_for_status()
        return cell_result(response.json())

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST; a 429 (a cap on what this caller has in flight, or on sessions) is waited
        out as its Retry-After says, with jitter, while that fits in the request timeout:
        a refusal the policy did not cause would otherwise null its rollout."""
        deadline = time.monotonic() + self.request_timeout_s
        while True:
            response = self._http.post(path, json=body)
            told = retry_after_s(response) if response.status_code == 429 else None
            if told is None:
                return response
            wait = jittered(told)
            if time.monotonic() + wait > deadline:
                return response
            time.sleep(wait)

    def close_sessions(self) -> None:
        """End this batch's sessions (their containers go back at once, not at the TTL)."""
        ids, self._sessions = list(self._sessions.values()), {}

        def close(session: str) -> None:
            try:
                self._http.delete(f"/v1/sessions/{session}")
            except httpx.HTTPError:
                pass  # the server's idle TTL ends it

        list(self._pool.map(close, ids))

    def close(self) -> None:
        self.close_sessions()
        self._pool.shutdown(wait=False)
        self._http.close()
