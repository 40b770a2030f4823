"""The code tool of multi-turn rollouts: how a policy writes a call (two formats), and the
client that runs one turn's calls in the reward server's sandbox, all together.

Formats (``tool_format``):

- ``fenced``: ToRL's and SimpleTIR's convention for models without a tool-call format. The
  policy writes a ```` ```python ```` block; generation stops at its closing fence
  (SimpleTIR's pattern, ``agent_utils.py``); the output comes back as an ```` ```output ````
  block (ToRL, arXiv 2503.23383, fig. 1), and the policy goes on.
- ``template``: the chat template's own format, Qwen2.5's and Hermes' ``<tool_call>{"name":
  "python", "arguments": {"code": ...}}</tool_call>``; the turn ends at the template's end of
  turn, and the result is a ``tool`` message rendered by the template, as TRL's
  ``_tool_call_loop`` does (``_get_tool_suffix_ids``).

What goes back to the policy follows ToRL: stdout, and of an error only its last line (the
traceback's file paths are noise); at most ``max_chars``, the middle cut as SimpleTIR cuts it.
A call the sandbox could not run (unavailable, timed out, refused) is an error text in the
conversation too, never an exception out of the step: the rollout goes on, and the step's
metrics count it (``tools/failure_frequency``).
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import httpx
from transformers import PreTrainedTokenizerBase

ToolState = Literal["stateless", "session"]
TOOL_NAME = "python"
# The schema a template renders into the system prompt (apply_chat_template(tools=...)).
PYTHON_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run a Python 3 program in a sandbox and return what it prints "
                       "(stdout, and the last line of an error).",
        "parameters": {"type": "object", "required": ["code"], "properties": {
            "code": {"type": "string", "description": "The program; print what you need."}}},
    },
}


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


# --- formats ------------------------------------------------------------------------------


class CallFormat(Protocol):
    name: str

    def tools(self) -> list[dict[str, Any]] | None:
        """The schemas the prompt's template renders (None: the prompt has none)."""

    def call_end(self, text: str) -> int | None:
        """Where a complete call ends in a turn's text, if the turn must stop there."""

    def parse(self, text: str) -> ToolCall | None:
        """The call in a finished turn's text; None: the turn made none."""

    def output_ids(self, tokenizer: PreTrainedTokenizerBase, result: str) -> list[int]:
        """The tokens of the tool's turn, which the policy reads and is not trained on."""


_FENCE = re.compile(r"```(?:py|python)?\n(.*?)\n```", re.DOTALL)  # SimpleTIR's pattern


class FencedFormat:
    """```` ```python ... ``` ```` then ```` ```output ... ``` ```` (ToRL, SimpleTIR)."""

    name = "fenced"

    def tools(self) -> None:
        return None

    def call_end(self, text: str) -> int | None:
        match = _FENCE.search(text)
        return match.end() if match else None

    def parse(self, text: str) -> ToolCall | None:
        match = _FENCE.search(text)
        return ToolCall(match.group(1)) if match else None

    def output_ids(self, tokenizer: PreTrainedTokenizerBase, result: str) -> list[int]:
        return tokenizer(f"\n```output\n{result}\n```\n", add_special_tokens=False).input_ids


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class TemplateFormat:
    """The chat template's ``<tool_call>`` JSON and ``tool`` role (Qwen2.5, Hermes)."""

    name = "template"

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        if not supports_tools(tokenizer):
            raise ValueError("tool_format 'template': the tokenizer's chat template renders "
                             "no tools; use tool_format 'fenced'")
        self._suffix_head: list[int] | None = None
        self._tokenizer = tokenizer

    def tools(self) -> list[dict[str, Any]]:
        return [PYTHON_TOOL]

    def call_end(self, text: str) -> None:
        return None  # the turn ends at the template's end of turn (an EOS id)

    def parse(self, text: str) -> ToolCall | None:
        match = _TOOL_CALL.search(text)
        if match is None:
            return None
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError as exc:
            return ToolCall(None, f"the tool call is not valid JSON ({exc.msg})")
        if not isinstance(call, dict) or call.get("name") != TOOL_NAME:
            name = call.get("name") if isinstance(call, dict) else None
            return ToolCall(None, f"no tool named {name!r}; the tool is {TOOL_NAME!r}")
        arguments = call.get("arguments")
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = None
        code = arguments.get("code") if isinstance(arguments, dict) else None
        if not isinstance(code, str):
            return ToolCall(None, "the call needs arguments {\"code\": \"...\"}")
        return ToolCall(code)

    def output_ids(self, tokenizer: PreTrainedTokenizerBase, result: str) -> list[int]:
        """The template's tokens after an assistant turn that called a tool: the tool message
        and the next assistant header. Rendered as TRL renders them: a conversation with and
        without the message, the difference taken after the first one's last EOS."""
        call = {"type": "function", "function": {"name": TOOL_NAME, "arguments": {}}}
        head = [{"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [call]}]
        message = {"role": "tool", "name": TOOL_NAME, "content": result}
        prefix = _ids(tokenizer.apply_chat_template(head, tokenize=True, tools=self.tools()))
        full = _ids(tokenizer.apply_chat_template(head + [message], tokenize=True,
                                                  add_generation_prompt=True,
                                                  tools=self.tools()))
        eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
        if eos:  # "...<|im_end|>\n": the policy's turn ended at the EOS, not after the newline
            prefix = prefix[: eos[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template renders a tool message that does not extend "
                             "the conversation before it")
        return full[len(prefix):]


def _ids(encoded: Any) -> list[int]:
    """apply_chat_template's ids, whether it returns a list or a BatchEncoding."""
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def supports_tools(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the chat template renders a ``tools`` list (Qwen2.5, Hermes, Llama 3.1 do;
    SmolLM2's and the tiny model's do not)."""
    template = tokenizer.chat_template
    return isinstance(template, str) and "tools" in template


def call_format(name: Literal["auto", "template", "fenced"],
                tokenizer: PreTrainedTokenizerBase) -> CallFormat:
    """``auto``: the template's own format where it has one, else the fenced convention."""
    if name == "template" or (name == "auto" and supports_tools(tokenizer)):
        return TemplateFormat(tokenizer)
    return FencedFormat()


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


def _why(exc: httpx.HTTPError) -> str:
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
                 max_output_chars: int = 512, concurrency: int = 64) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.state = state
        self.run_timeout_s = run_timeout_s
        self.max_output_chars = max_output_chars
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, limits=limits,
                                  timeout=request_timeout_s)
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
            response = self._http.post("/run_code", json={
                "code": call.code, "language": "python", "run_timeout": self.run_timeout_s})
            response.raise_for_status()  # 503: no sandbox; 4xx: refused -- the tool's failure
            return run_code_result(response.json(), self.run_timeout_s)
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code in POLICY_REFUSALS:  # its code, too large or malformed
                return ToolResult(f"Error: the call was refused ({_why(exc)})", failed=True)
            return unavailable(_why(exc))
        except httpx.HTTPError as exc:
            return unavailable(_why(exc))

    def _cell(self, key: int, code: str) -> ToolResult:
        session = self._sessions.get(key)
        if session is None:
            response = self._http.post("/v1/sessions", json={"language": "python"})
            response.raise_for_status()
            session = self._sessions[key] = response.json()["session_id"]
        response = self._http.post(f"/v1/sessions/{session}/run",
                                   json={"code": code, "cell_timeout": self.run_timeout_s})
        if response.status_code in (404, 410):  # lost (its interpreter died): a fresh one next
            self._sessions.pop(key, None)
        response.raise_for_status()
        return cell_result(response.json())

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
