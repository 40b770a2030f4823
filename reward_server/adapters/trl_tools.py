"""The reward server's sandbox as a tool inside TRL's ``GRPOTrainer`` (tool use in GRPO).

Stateless, one fresh process per call (ToRL's and SimpleTIR's way)::

    from reward_server.adapters.trl_tools import sandbox_tool
    trainer = GRPOTrainer(..., tools=[sandbox_tool("http://reward:8000")],
                          args=GRPOConfig(max_tool_calling_iterations=4, ...))

A session per rollout, so a later call sees an earlier one's variables::

    from reward_server.adapters.trl_tools import SandboxSessions
    sessions = SandboxSessions("http://reward:8000")
    trainer = GRPOTrainer(..., environment_factory=sessions, callbacks=[sessions.callback()])

TRL builds each tool's schema from the function's name, type hints and Google-style
docstring (``transformers.utils.get_json_schema``), so ``run_python`` is a plain function
with those. What it returns follows ToRL (``trainer/tools.py``, which this reuses): stdout,
and of an error only its last line, at most ``max_output_chars``. It never raises into
TRL's loop: a sandbox that cannot answer is an error text the policy reads, as our own
trainer's tool gives it. TRL counts only raised exceptions as tool failures, so those texts
are not in its ``tools/failure_frequency``, and a tool cannot make TRL score a rollout
null; a ``SandboxSession`` counts its ``outages`` so that a reward function (given
``environments``) can.

The tools are synchronous: TRL runs one rollout's tools after another and gathers async ones
only within one assistant message, so an async client would buy little and bind an httpx
client to TRL's daemon loop.

Session lifetime: TRL keeps a pool of environment instances (one per rollout of a generation
batch per process), calls ``reset`` before each rollout and has no end-of-rollout hook. A
``SandboxSession`` opens its server session at its first call, and closes it at the next
``reset`` (the next rollout that reuses the instance), at ``SandboxSessions.close()`` (which
``callback()`` calls when training ends), at garbage collection and at exit; should all of
those be missed (a killed process), the server's idle TTL ends it (``idle_ttl_s``). So a
generation batch holds up to one session per rollout that called the tool, all at once. The
server lets one caller (its token's name, every host of a team together; without tokens, a
host: all its processes and loopback addresses count as one) hold
``sandbox_session_max_per_caller`` sessions (4) and ``sandbox_session_max_open`` (16) in all,
the last ``sandbox_session_reserve`` (4) of them for callers that hold none; a call past a cap
waits out the 429's Retry-After when that fits in its request timeout, else reads
``HTTP 429`` as its text. For B rollouts in flight per caller that all use the tool,
start the server with ``REWARD_SERVER_SANDBOX_SESSION_MAX_PER_CALLER=B`` and ``..._MAX_OPEN``
at least B plus the reserve (each session holds a container: plan memory for them).
"""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable
from typing import Any

import httpx

from reward_server.tool_client import (
    POLICY_REFUSALS,
    CodeTool,
    ToolCall,
    cell_result,
    clip,
    unavailable,
    why,
)


def sandbox_tool(url: str, *, token: str | None = None, run_timeout_s: float = 10.0,
                 request_timeout_s: float = 60.0, max_output_chars: int = 512,
                 concurrency: int = 8) -> Callable[[str], str]:
    """``run_python(code) -> str`` for ``GRPOTrainer(tools=[...])``: each call is one
    ``POST /run_code`` (a fresh process and work dir; nothing kept between calls)."""
    tool = CodeTool(url, token=token, run_timeout_s=run_timeout_s,
                    request_timeout_s=request_timeout_s, max_output_chars=max_output_chars,
                    concurrency=concurrency)

    def run_python(code: str) -> str:
        """Run a Python 3 program in a sandbox and return what it prints.

        Args:
            code: The whole program; print what you need to see.

        Returns:
            The program's stdout, and the last line of its error if it failed.
        """
        try:
            return tool.run([(0, ToolCall(str(code)))]).results[0].text
        except Exception as exc:  # noqa: BLE001 -- an answer the client could not read
            return unavailable(f"{type(exc).__name__}: {exc}"[:200]).text

    run_python.close = tool.close  # type: ignore[attr-defined]
    return run_python


class SandboxSession:
    """One rollout's Python session: TRL exposes ``run_python`` as its tool (every public
    method of an environment is one, hence only ``reset`` and ``run_python`` here)."""

    def __init__(self, owner: SandboxSessions) -> None:
        self._owner = owner
        self._session: str | None = None
        self.calls = 0  # this rollout's calls (reset zeroes both), for a reward or a test
        # calls the sandbox could not answer for a reason the policy did not cause (no server,
        # a timeout, a cap): a reward function (TRL passes ``environments``) can score such a
        # rollout None rather than judge what followed an error text it did not earn
        self.outages = 0

    def reset(self, **row: Any) -> None:
        """A new rollout: the last one's session (its variables) goes."""
        self._end()
        self.calls = self.outages = 0

    def run_python(self, code: str) -> str:
        """Run Python code in this conversation's interpreter and return what it prints.
        Variables, imports and functions stay defined for the next call.

        Args:
            code: The code to run; the value of its last expression is shown too.

        Returns:
            Its stdout and last expression's value, and the last line of its error if any.
        """
        self.calls += 1
        try:
            text = self._cell(str(code))
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code in POLICY_REFUSALS:
                text = f"Error: the call was refused ({why(exc)})"
            else:
                text = self._outage(why(exc))
        except httpx.HTTPError as exc:
            text = self._outage(why(exc))
        except Exception as exc:  # noqa: BLE001 -- an answer the client could not read
            text = self._outage(f"{type(exc).__name__}: {exc}"[:200])
        return clip(text, self._owner.max_output_chars)

    def _outage(self, why: str) -> str:
        self.outages += 1
        return unavailable(why).text

    def _cell(self, code: str) -> str:
        http = self._owner.http
        if self._session is None:
            body: dict[str, Any] = {"language": "python"}
            if self._owner.idle_ttl_s is not None:
                body["idle_ttl_s"] = self._owner.idle_ttl_s
            response = http.post("/v1/sessions", json=body)
            response.raise_for_status()
            self._session = response.json()["session_id"]
        response = http.post(f"/v1/sessions/{self._session}/run",
                             json={"code": code, "cell_timeout": self._owner.cell_timeout_s})
        if response.status_code in (404, 410):  # lost (its interpreter died): a fresh one next
            self._session = None
        response.raise_for_status()
        return cell_result(response.json()).text

    def _end(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                self._owner.http.delete(f"/v1/sessions/{session}")
            except Exception:  # noqa: BLE001 -- closed client or no server: the TTL ends it
                pass

    def __del__(self) -> None:
        self._end()


class SandboxSessions:
    """The ``environment_factory``: makes one ``SandboxSession`` per call (TRL makes one per
    rollout of a batch and reuses them), all on one HTTP client, and closes what they hold at
    ``close()``, at the end of training (``callback()``) and at exit."""

    def __init__(self, url: str, *, token: str | None = None, cell_timeout_s: float = 10.0,
                 request_timeout_s: float = 60.0, max_output_chars: int = 512,
                 idle_ttl_s: float | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers,
                                 timeout=request_timeout_s)
        self.cell_timeout_s = cell_timeout_s
        self.max_output_chars = max_output_chars
        self.idle_ttl_s = idle_ttl_s  # a shorter TTL ends what a killed trainer left sooner
        self._made: weakref.WeakSet[SandboxSession] = weakref.WeakSet()
        atexit.register(_close_at_exit, weakref.ref(self))

    def __call__(self) -> SandboxSession:
        environment = SandboxSession(self)
        self._made.add(environment)
        return environment

    def close_sessions(self) -> None:
        """End every open session these environments hold (their containers go at once)."""
        for environment in list(self._made):
            environment._end()

    def close(self) -> None:
        self.close_sessions()
        self.http.close()

    def callback(self) -> Any:
        """A ``TrainerCallback`` that closes the sessions when ``train()`` ends (the last
        batch's rollouts have no next ``reset``)."""
        from transformers import TrainerCallback

        sessions = self

        class CloseSandboxSessions(TrainerCallback):
            def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                sessions.close_sessions()

        return CloseSandboxSessions()


def _close_at_exit(ref: weakref.ref[SandboxSessions]) -> None:
    sessions = ref()  # a weak reference: registering at exit must not keep the factory alive
    if sessions is not None:
        sessions.close_sessions()
