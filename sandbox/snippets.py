"""One snippet (``POST /run_code``): a program run once on a stdin in a warm container of the
sandbox's pool, its output and exit code returned, nothing judged. The host half of the
harness's snippet job (``sandbox/harness/snippet.py``): the limits a caller asks for capped by
the server's, the container borrowed and given back (replaced after a limit hit or a dirty
run), and what the channel says when the program broke it.

Nothing here keeps state between calls: a rollout that needs its variables kept from one
call to the next opens a session (``sandbox/sessions.py``, an interpreter of its own)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sandbox.channel import ChannelClosed, ChannelMisframed, ChannelTimeout
from sandbox.config import SandboxConfig, capped
from sandbox.errors import SandboxUnavailable
from sandbox.harness.snippet import STREAMS
from sandbox.harness.statuses import (
    HARNESS_ERROR,
    MEMORY_LIMIT,
    OUTPUT_LIMIT,
    REPLACES_CONTAINER,
    RUNTIME_ERROR,
    TIMEOUT,
)
from sandbox.languages import LanguageSpec
from sandbox.pool import PooledContainer
from sandbox.response_limit import text_within
from sandbox.runner import OUTSIDE_SLACK_S, Sandbox

log = logging.getLogger("sandbox.snippets")

EXITED = "exited"  # the command ended by itself (any exit code)
# How a command ended: by itself, or stopped by one of the sandbox's limits
ENDINGS = frozenset({EXITED, TIMEOUT, MEMORY_LIMIT, OUTPUT_LIMIT})
DEFAULT_COMPILE_TIMEOUT_S = 10.0  # SandboxFusion's default


@dataclass(frozen=True)
class Snippet:
    """What a caller asks to run. ``files``: path in the work dir -> base64 content, written
    before the program; ``fetch_files``: paths read back after it. A limit of None is the
    server's default; any limit is capped by the server's maximum (``Limits``)."""

    language: LanguageSpec
    code: str
    stdin: str = ""
    files: Mapping[str, str] = field(default_factory=dict)
    fetch_files: tuple[str, ...] = ()
    run_timeout_s: float | None = None
    compile_timeout_s: float | None = None
    memory_mb: int | None = None


@dataclass(frozen=True)
class Limits:
    """The limits a snippet ran under, after the server's caps."""

    run_timeout_s: float
    compile_timeout_s: float
    memory_mb: int
    output_limit_bytes: int  # stdout, and stderr, each
    response_limit_bytes: int  # the streams' text (as JSON) and the files' base64, together

    @classmethod
    def of(cls, snippet: Snippet, config: SandboxConfig) -> Limits:
        c = config
        return cls(
            run_timeout_s=capped(snippet.run_timeout_s, c.default_time_limit_s,
                                 c.max_time_limit_s),
            compile_timeout_s=capped(snippet.compile_timeout_s, DEFAULT_COMPILE_TIMEOUT_S,
                                     c.compile_time_limit_s),
            memory_mb=capped(snippet.memory_mb, c.max_memory_mb, c.max_memory_mb),
            output_limit_bytes=c.output_limit_bytes,
            response_limit_bytes=c.snippet_response_limit_bytes)


@dataclass(frozen=True)
class Command:
    """One command's end: ``ended`` is EXITED (``code`` its exit code, negative for a
    signal) or the limit that stopped it (``code`` then as it died, None for a timeout)."""

    ended: str
    code: int | None
    stdout: str
    stderr: str
    time_s: float


@dataclass(frozen=True)
class SnippetResult:
    """``compile`` is None for a language that does not compile, ``run`` None when the
    compile failed; ``files`` the fetched ones (base64), ``missing`` why the others were
    not; ``cut`` what the response limit cut (``run.stdout``: its first bytes kept) or left
    out (``files/<path>``), with its size in bytes before; ``note`` what the sandbox saw
    beyond the commands (the container died)."""

    limits: Limits
    compile: Command | None = None
    run: Command | None = None
    files: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    cut: dict[str, int] = field(default_factory=dict)
    note: str | None = None
    # the image and runtime of the container that ran it (runner.ExecutionResult's)
    image_id: str | None = None
    runtime: str | None = None


def job_of(snippet: Snippet, limits: Limits, config: SandboxConfig) -> dict[str, Any]:
    """The harness's snippet job."""
    return {
        "mode": "snippet", "language": snippet.language.as_job(limits.memory_mb),
        "source": snippet.code, "stdin": snippet.stdin, "files": dict(snippet.files),
        "fetch_files": list(snippet.fetch_files), "time_limit_s": limits.run_timeout_s,
        "compile_time_limit_s": limits.compile_timeout_s, "memory_mb": limits.memory_mb,
        "compile_memory_mb": config.compile_memory_mb,
        "output_limit_bytes": limits.output_limit_bytes,
        "response_limit_bytes": limits.response_limit_bytes,
        "stderr_tail_bytes": config.stderr_tail_bytes,
        "budget_s": limits.compile_timeout_s + limits.run_timeout_s + 1.0,
    }


async def run_snippet(sandbox: Sandbox, snippet: Snippet) -> SnippetResult:
    """Run ``snippet`` in one of ``sandbox``'s containers; raises SandboxUnavailable when
    none can be had (or the harness failed before the program ran, on two containers)."""
    config = sandbox.config
    limits = Limits.of(snippet, config)
    job = job_of(snippet, limits, config)
    budget = job["budget_s"] + OUTSIDE_SLACK_S
    pool = sandbox.pool
    failure = "Docker engines went away"
    stale, died_reruns, harness_reruns = 1, 1, 1
    for _ in range(len(pool.pools) + 4):
        pooled = await pool.acquire()
        try:
            reply = await pool.request(pooled, job, budget)
        except ChannelMisframed as exc:
            left = not exc.sent and stale > 0  # left there by an earlier execution
            pool.release(pooled, healthy=False, by_holder=not left)
            if left:
                stale -= 1
                continue
            return _ran_in(_broken(limits, "the program wrote on the sandbox's own channel"),
                           pooled)
        except ChannelClosed as exc:
            if await pool.container_lost(pooled):
                continue  # its engine went away: another engine, if one is left
            # gVisor: what ran before may have killed it (runner.py)
            worn = pooled.pool.gvisor and pooled.uses > 0 and died_reruns > 0
            pool.release(pooled, healthy=False, by_holder=not worn)
            if worn:
                died_reruns -= 1
                continue
            log.warning("sandbox container %s died under a snippet: %s", pooled.id, exc)
            return _ran_in(_broken(limits, "the sandbox container died during the run (its "
                                   "memory limit, the backstop for every process inside)"),
                           pooled)
        except ChannelTimeout:
            pool.release(pooled, healthy=False)
            return _ran_in(SnippetResult(limits, run=Command(
                TIMEOUT, None, "", f"ran past the wall-clock budget of {budget:.1f} s",
                budget), note="stopped from outside the container"), pooled)
        except BaseException:
            pool.release(pooled, healthy=False)
            raise
        try:  # decoded and cut off the event loop: up to the response limit of its bytes
            result = await asyncio.to_thread(_parse, reply, limits)
        except BaseException:  # the client hung up meanwhile: the container goes back
            pool.release(pooled, healthy=isinstance(reply, dict) and not reply.get("dirty"))
            raise
        if result is None:
            ran = isinstance(reply, dict) and bool(reply.get("candidate_failed"))
            pool.release(pooled, healthy=False, by_holder=ran)
            detail = reply.get("detail") if isinstance(reply, dict) else None
            if isinstance(reply, dict) and reply.get("candidate_failed") and harness_reruns:
                harness_reruns -= 1  # once more in a fresh container before it is the code's
                continue
            if isinstance(reply, dict) and reply.get("candidate_failed"):
                return _ran_in(_broken(limits, "the run failed after the program started: "
                                       f"{detail}"), pooled)
            failure = f"sandbox harness failed: {detail}"
            continue
        commands = [c for c in (result.compile, result.run) if c is not None]
        pool.release(pooled, healthy=not reply.get("dirty") and not any(
            c.ended in REPLACES_CONTAINER for c in commands))
        return _ran_in(result, pooled)
    raise SandboxUnavailable(pool.unavailable_reason or failure)


def _ran_in(result: SnippetResult, pooled: PooledContainer) -> SnippetResult:
    return replace(result, image_id=pooled.image_id, runtime=pooled.runtime)


def _broken(limits: Limits, why: str) -> SnippetResult:
    """The program broke the sandbox under it: it ended (no exit code), and ``note`` says
    how; ENDINGS holds no other way to end."""
    return SnippetResult(limits, run=Command(EXITED, None, "", why, 0.0), note=why)


def _parse(reply: Any, limits: Limits) -> SnippetResult | None:
    """The harness's answer, its streams and files within the response limit; None when it
    is not a snippet's (a harness error, a failure)."""
    if (not isinstance(reply, dict) or reply.get("status") == HARNESS_ERROR
            or reply.get("candidate_failed") or not isinstance(reply.get("files"), dict)):
        return None
    ends = {step: _ending(reply[step]) for step in ("compile", "run")
            if reply.get(step) is not None}
    try:
        data = {(step, stream): base64.b64decode(reply[step][stream], validate=True)
                for step in ends for stream in ("stdout", "stderr")}
    except (KeyError, TypeError, ValueError, binascii.Error):
        return None
    if any(end is None for end in ends.values()):
        return None
    # what the harness cut, with each one's size before; then what the text cuts further
    cut = {k: v for k, v in _mapping(reply, "cut").items()
           if isinstance(k, str) and tuple(k.split(".")) in data and isinstance(v, int)}
    texts, left = {}, limits.response_limit_bytes
    for key in STREAMS:  # the harness's order
        if key in data:
            texts[key], size, whole = text_within(data[key], left)
            if not whole:
                cut.setdefault(".".join(key), len(data[key]))
            left -= size
    commands = {step: Command(ended, code, texts[step, "stdout"], texts[step, "stderr"], time_s)
                for step, (ended, code, time_s) in ends.items()}
    missing = {str(k): str(v) for k, v in _mapping(reply, "missing").items()}
    cut.update((f"files/{k}", v) for k, v in _mapping(reply, "cut_files").items()
               if isinstance(v, int))
    files = {}
    for name, encoded in reply["files"].items():
        if not isinstance(encoded, str):
            continue
        if len(encoded) > left:  # the text took more than the bytes the harness counted
            size = len(encoded) // 4 * 3 - encoded[-2:].count("=")
            cut[f"files/{name}"] = size
            missing[name] = f"over the response limit ({size} bytes)"
            continue
        files[name], left = encoded, left - len(encoded)
    return SnippetResult(limits, compile=commands.get("compile"), run=commands.get("run"),
                         files=files, missing=missing, cut=cut)


def _mapping(reply: dict[str, Any], key: str) -> dict[Any, Any]:
    value = reply.get(key)
    return value if isinstance(value, dict) else {}


def _ending(raw: Any) -> tuple[str, int | None, float] | None:
    """How a command of the reply ended: (ended, code, seconds); None when malformed."""
    try:
        status = raw["status"]
        ended = EXITED if status in (None, RUNTIME_ERROR) else status
        code = raw["code"]
        if ended not in ENDINGS or not (code is None or isinstance(code, int)):
            return None
        return ended, None if ended == TIMEOUT else code, float(raw["time_ms"]) / 1000
    except (KeyError, TypeError, ValueError):
        return None


__all__ = ["ENDINGS", "EXITED", "Command", "Limits", "Snippet", "SnippetResult",
           "run_snippet"]
