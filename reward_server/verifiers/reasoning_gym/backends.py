"""Where the reasoning_gym verifier's answers are scored.

``SandboxScoring`` (the default): in the sandbox service's containers, behind its fair gate,
by the scorer fork server baked into the image (``sandbox/scoring.py``,
``sandbox/harness/scorer.py``). reasoning-gym's scorers evaluate the answer's text as code
(``eval``, SymPy's ``parse_expr``/``sympify``/``lambdify``), so they run where a hostile
answer reaches nothing: the candidate's uid, seccomp, no network, no Docker socket, a
read-only root, limits, and a process of its own per chunk.

``HostScoring`` (``host_scoring``, off by default): in worker processes on the host, guarded
by the deny-list alone, for a trusted setup without Docker (the completions are the
operator's own). A guard bypass there runs as the server's workers.

Either answers ``score(jobs)`` with the results of a prefix of the jobs (the sandbox's turn:
the caller sends the rest again through the gate), or an empty list when the chunk ran out
of time as a whole and each job should run alone (the host pool's limit is per hand-off).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, Protocol

from reward_server.fair_queue import FairGate
from reward_server.process_pool import TimeoutPool
from reward_server.sandbox_service import TURN_S, SandboxService
from reward_server.statuses import UNAVAILABLE
from reward_server.verifiers.reasoning_gym import library
from reward_server.verifiers.reasoning_gym.settings import ReasoningGymSettings
from sandbox.errors import SandboxUnavailable
from sandbox.pool import BUILD_HINT
from sandbox.scoring import Scored, ScoringLimits, score_chunk

# (task, answer, the entry as parsed JSON, the config as canonical JSON): what a score
# depends on
Job = tuple[str, str, dict[str, Any], str]


class Backend(Protocol):
    gate: FairGate
    slots: int
    missing: str | None  # why nothing can be scored (every item unavailable), or None

    async def score(self, jobs: list[Job]) -> list[Scored]: ...

    async def stop(self) -> None: ...


class SandboxScoring:
    def __init__(self, service: SandboxService, config: ReasoningGymSettings) -> None:
        self.sandbox, self.gate, self.slots = service.sandbox, service.gate, service.gate.slots
        self.missing = None
        self.limits = ScoringLimits(
            timeout_s=config.timeout_s, turn_s=TURN_S, guard=config.guard,
            memory_mb=min(config.memory_mb, service.config.max_memory_mb))

    async def score(self, jobs: list[Job]) -> list[Scored]:
        try:
            return await score_chunk(self.sandbox, "reasoning_gym", jobs, self.limits)
        except SandboxUnavailable as exc:
            detail = str(exc) if "build_image.sh" in str(exc) else f"{exc}; {BUILD_HINT}"
            return [Scored(UNAVAILABLE, None, detail)] * len(jobs)

    async def stop(self) -> None:
        return None  # the sandbox is the app's


class Unbound:
    """Before the verifier started, or on a server without a sandbox service."""

    def __init__(self, why: str) -> None:
        self.gate, self.slots, self.missing = FairGate(1, "reasoning_gym"), 1, why

    async def score(self, jobs: list[Job]) -> list[Scored]:
        return [Scored(UNAVAILABLE, None, self.missing)] * len(jobs)

    async def stop(self) -> None:
        return None


class HostScoring:
    """The host's worker processes (``host_scoring``): a chunk under one wall-clock limit;
    one that runs out of it is run again one job at a time (``[]``)."""

    def __init__(self, config: ReasoningGymSettings) -> None:
        self.config = config
        self.pool = TimeoutPool(config.workers, config.memory_mb, library.warm_up_worker,
                                name="rgym-worker")
        self.gate = FairGate(self.pool.slots, "reasoning_gym")
        self.slots = self.pool.slots
        self.missing: str | None = None

    async def start(self) -> None:
        names = await self.pool.run(library.task_names, timeout=120)
        if names.outcome != "ok":  # the server runs on; every item says what to install
            self.missing = f"reasoning-gym is not installed ({names.detail}): " \
                           f"{library.EXTRA_HINT}"

    async def score(self, jobs: list[Job]) -> list[Scored]:
        if self.missing is not None:
            return [Scored(UNAVAILABLE, None, self.missing)] * len(jobs)
        timeout = self.config.timeout_s
        task = await self.pool.run(library.score_many, jobs, timeout=timeout)
        if task.outcome == "ok":
            return [Scored(s, None if math.isnan(v) else v, d) for s, v, d in task.value]
        if task.outcome == UNAVAILABLE:  # the pool's loss: no answer's doing
            return [Scored(UNAVAILABLE, None, task.detail)] * len(jobs)
        if len(jobs) > 1:
            return []  # which answer it was: each alone, under its own limit
        if task.outcome == "timeout":
            return [Scored("timeout", 0.0, task.detail,
                           timeout if task.cpu_bound else 0.0)]
        # out of memory, or the scorer ended its worker: this answer's doing
        return [Scored("error", 0.0, f"the task's scorer failed on this answer "
                       f"({task.outcome}): {task.detail}")]

    async def stop(self) -> None:
        await asyncio.to_thread(self.pool.close)
