"""Scoring in the sandbox, the host's half (``sandbox/harness/scorer.py`` is the container's):
a chunk of one request's answers sent to a warm container of the pool, scored there by a
library scorer under the candidate's uid, each item's result back.

The harness answers for a prefix of the chunk (its turn, ``ScoringLimits.turn_s``); the
caller sends the rest again, through its fair gate. The rules for what went wrong follow
``runner.py``'s: an engine lost or a stale frame is nobody's doing (another container); a
used gVisor container that died, or a harness that failed after a child ran, gets one more
try in a fresh container; what then fails again was the chunk's doing, and each of its items
runs alone, so only the item that did it scores 0.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from sandbox.channel import ChannelClosed, ChannelMisframed, ChannelTimeout
from sandbox.errors import SandboxUnavailable
from sandbox.harness.scorer import KILL_SLACK_S, SERVER_START_S, STATUSES, WARM_S
from sandbox.runner import OUTSIDE_SLACK_S, Sandbox

log = logging.getLogger("sandbox.scoring")

# One item of a chunk: (task, answer, entry as parsed JSON, the task's config as JSON)
ScoringItem = tuple[str, str, dict[str, Any], str]


@dataclass(frozen=True)
class ScoringLimits:
    timeout_s: float  # one item
    memory_mb: int  # what a chunk's process may add to the scorer it was forked from
    turn_s: float  # a chunk's turn on its container: no item starts after it
    guard: bool = True  # the deny-list guard in the scorer too (defence in depth)


@dataclass(frozen=True)
class Scored:
    """One item's result: ``status`` ok / error / timeout / bad_entry (the scorer's), with
    ``cpu_s`` its CPU time (a timeout that used its limit in CPU was no machine's load)."""

    status: str
    score: float | None
    detail: str | None
    cpu_s: float = 0.0


async def score_chunk(sandbox: Sandbox, scorer: str, items: list[ScoringItem],
                      limits: ScoringLimits) -> list[Scored]:
    """Results for a prefix of ``items`` (at least one). Raises SandboxUnavailable when no
    container can score (none to be had, or an image without the scorer)."""
    # the items as JSON text, which the harness writes to each child's chunk as it is
    job = {"mode": "score", "scorer": scorer, "items": json.dumps(items),
           "count": len(items), "warm": sorted({i[0] for i in items if i[3] == "null"}),
           "timeout_s": limits.timeout_s, "memory_mb": limits.memory_mb,
           "turn_s": limits.turn_s, "guard": limits.guard}
    # the server's start and a warm-up, then one turn and its last item's limit
    budget = (SERVER_START_S + WARM_S + limits.turn_s + limits.timeout_s + KILL_SLACK_S
              + OUTSIDE_SLACK_S)
    pool = sandbox.pool
    failure = "Docker engines went away"
    stale, second_chances = 1, 1
    # what the engine did, never the chunk's (as ``runner._run_job``): a stream gone before
    # the job (once for each container there is), one the engine dropped or held under it
    # (it restarted or stalled), no answer while the engine did not serve
    dead, restarted, sick = len(pool.pools) * sandbox.config.pool_size, 2, 1
    for _ in range(len(pool.pools) + 4 + dead + restarted + sick):
        pooled = await pool.acquire()
        mark, sent_at = pooled.pool.watch.mark(), time.monotonic()
        try:
            reply = await pool.request(pooled, job, budget)
        except ChannelMisframed as exc:
            pool.release(pooled, healthy=False)
            if not exc.sent and stale > 0:  # left there by an earlier execution
                stale -= 1
                continue
            return await _alone(sandbox, scorer, items, limits, "the chunk's scorer wrote on "
                                "the sandbox's channel")
        except ChannelClosed as exc:
            if not exc.sent and dead > 0:  # dead before the job reached it
                pool.release(pooled, healthy=False, by_holder=False)
                dead -= 1
                continue
            if await pool.container_lost(pooled):
                continue  # its engine went away: another engine, if one is left
            if restarted > 0 and await pool.dropped_by_engine(pooled, mark):
                restarted -= 1
                continue
            pool.release(pooled, healthy=False)
            if second_chances > 0:  # a used gVisor container may die of what ran before
                second_chances -= 1
                continue
            log.warning("sandbox container %s died under a scoring chunk: %s", pooled.id, exc)
            return await _alone(sandbox, scorer, items, limits, "the sandbox container died "
                                "while this answer's chunk was scored (its memory limit)")
        except ChannelTimeout:
            if (reason := await pool.unanswered(pooled, budget)) is not None:
                if sick > 0:
                    sick -= 1
                    continue
                raise SandboxUnavailable(reason) from None
            if restarted > 0 and pool.stalled_under(pooled, sent_at):
                restarted -= 1  # its answer may be held yet in the stalled engine
                continue
            pool.release(pooled, healthy=False)
            return await _alone(sandbox, scorer, items, limits, "the chunk ran past its "
                                f"wall-clock budget of {budget:.1f} s", status="timeout")
        except BaseException:
            pool.release(pooled, healthy=False)
            raise
        results = _parse(reply, len(items))
        pool.release(pooled, healthy=results is not None and not reply.get("dirty"))
        if results is not None:
            return results
        status = reply.get("status") if isinstance(reply, dict) else None
        detail = str(reply.get("detail")) if isinstance(reply, dict) else "no reply"
        if status == "unavailable":
            raise SandboxUnavailable(detail)
        if isinstance(reply, dict) and reply.get("candidate_failed") and second_chances > 0:
            second_chances -= 1  # once more in a fresh container before it is the chunk's
            continue
        if isinstance(reply, dict) and reply.get("candidate_failed"):
            return await _alone(sandbox, scorer, items, limits, f"the scoring failed after "
                                f"the scorer started: {detail}")
        failure = f"sandbox harness failed: {detail}"  # before any scorer ran: another one
    raise SandboxUnavailable(pool.unavailable_reason or failure)


async def _alone(sandbox: Sandbox, scorer: str, items: list[ScoringItem],
                 limits: ScoringLimits, why: str, status: str = "error") -> list[Scored]:
    """A chunk broke its container twice: each item again on its own, so the one that does
    it again is the one that scores 0 (``status``, with ``why``)."""
    if len(items) == 1:
        return [Scored(status, 0.0, why)]
    out: list[Scored] = []
    for item in items:
        out += await score_chunk(sandbox, scorer, [item], limits)
    return out


def _parse(reply: Any, expected: int) -> list[Scored] | None:
    """The harness's results, checked; None when the reply is not a scoring reply."""
    if not isinstance(reply, dict) or reply.get("status") != "ok":
        return None
    results = reply.get("results")
    if not isinstance(results, list) or not 1 <= len(results) <= expected:
        return None
    out = []
    for r in results:
        if not (isinstance(r, list) and len(r) == 4 and r[0] in STATUSES
                and (r[1] is None or isinstance(r[1], int | float))
                and (r[2] is None or isinstance(r[2], str)) and isinstance(r[3], int | float)):
            return None
        out.append(Scored(r[0], None if r[1] is None else float(r[1]), r[2], float(r[3])))
    return out


__all__ = ["Scored", "ScoringItem", "ScoringLimits", "score_chunk"]
