"""The ``code`` verifier: run the completion's program against the item's tests in the Docker
sandbox (``sandbox/``, the server's ``SandboxService``, behind its fair gate), score the
counts, cache what the program decided.

If the engine or the image is missing, the server still starts; code items then come back
``sandbox_unavailable`` with a null score and the command to run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from reward_server import metrics
from reward_server.run_code.session_settings import SessionSettings
from reward_server.sandbox_service import TURN_S, SandboxService
from reward_server.sandbox_settings import CAPACITY, SECTION, SandboxSection, SandboxSettings
from reward_server.slow_lane import NOT_RUN, Done, LaneVerdicts, SlowLane, Turn
from reward_server.verifiers.base import Verifier
from reward_server.verifiers.code.schemas import CodeItem, CodeResult, CodeTestResult
from sandbox import Execution, ExecutionResult, SandboxUnavailable, TestResult
from sandbox.harness.statuses import (
    BAD_TESTS,
    NO_CODE,
    PASSED,
    SANDBOX_UNAVAILABLE,
    TIMEOUT,
    UNCACHEABLE_ITEM,
    UNCACHEABLE_TEST,
    UNSCORABLE,
)


class CodeVerifier(Verifier):
    name = "code"
    item_model = CodeItem
    result_model = CodeResult
    description = "Runs the program against test cases in a Docker sandbox."
    # the sandbox's section: where it is loaded the app makes a SandboxService from it
    settings_model = SandboxSettings
    settings_prefix = SECTION
    null_statuses = UNSCORABLE  # a dataset's broken tests, found before the candidate ran
    # where containers run and how many, and the sessions' and /run_code's own limits
    capacity_settings = CAPACITY | frozenset(SessionSettings.model_fields) | {
        "snippet_response_limit_bytes"}
    config: SandboxSection

    _service: SandboxService | None = None

    def use_sandbox(self, sandbox: SandboxService | None) -> None:
        self._service = sandbox

    async def start(self) -> None:
        if self._service is None:  # the app makes one wherever this verifier is loaded
            raise RuntimeError("the code verifier runs in the server's sandbox service, which "
                               "the app hands it before start")
        self.sandbox = self._service.sandbox
        self._lane: SlowLane[CodeResult] = SlowLane(
            self.name, self._service.gate, self.settings.cache_size,
            self.settings.timeout_memory_s, _LANE_VERDICTS)

    async def verify(self, items: Sequence[CodeItem]) -> list[CodeResult]:  # type: ignore[override]
        return list(await asyncio.gather(*(self._verify_one(i) for i in items)))

    async def _verify_one(self, item: CodeItem) -> CodeResult:
        execution = item.run  # the program and its key: made when the item was validated
        if execution is None:
            result = CodeResult(score=0.0, passed=0, total=item.execution.test_count,
                                status=NO_CODE, detail="the response contains no code")
        else:
            run = await self._lane.run(
                item.key, lambda turn: self._run(execution, turn),
                not_run=lambda reason: CodeResult(score=None, passed=0,
                                                  total=execution.test_count,
                                                  status=NOT_RUN, detail=reason))
            result = _score(run, item.all_or_nothing)
        if any(t.status == TIMEOUT for t in result.tests):
            metrics.TIMEOUTS.labels(self.name).inc()
        return result

    def _others_waiting(self) -> bool:
        return self._lane.gate.waiting > 0

    async def _run(self, execution: Execution, turn: Turn) -> Done[CodeResult]:
        """A container when the lane gives this request its turn; an item that outlasts
        ``TURN_S`` while other items wait goes back to the gate between two tests and runs
        the rest in its next turn (the harness stops it there; its budget carries over);
        with nobody waiting it goes on in the same container. An assertion item runs in one
        turn, no longer than a test may (sandbox/harness/turns.py). A test's wall-clock
        timeout may have been the machine's load: believed the second time; so may a
        ``momentary`` verdict (a compile or a checker past its wall-clock limit, a full disk),
        which is never cached. A test the load held back (``starved``) is neither cached nor
        remembered."""
        tests: list[TestResult] = []
        spent_s, rest, momentary, starved = 0.0, execution, False, False
        ran_in: set[tuple[str | None, str | None]] = set()  # each turn's container's
        await self.sandbox.build_made(execution)  # a copy's compile: waited for holding nothing
        while True:
            async with turn.slot():
                try:
                    run = await self.sandbox.execute(rest, TURN_S, spent_s,
                                                     others_waiting=self._others_waiting)
                except SandboxUnavailable as exc:
                    return Done(CodeResult(score=None, passed=0, total=execution.test_count,
                                           status=SANDBOX_UNAVAILABLE, detail=str(exc)))
            tests += run.tests
            if run.image_id is not None or run.runtime is not None:
                ran_in.add((run.image_id, run.runtime))
            momentary = momentary or run.momentary
            starved = starved or run.starved
            if not run.yielded:
                break
            metrics.TURNS_YIELDED.labels(self.name).inc()
            spent_s += run.elapsed_s
            rest = replace(rest, tests=rest.tests[len(run.tests):])
        result = _as_result(replace(run, tests=tests), execution.test_count)
        result._ran_in = frozenset(ran_in)  # noqa: SLF001 - what its block names (provenance.py)
        if starved:  # the load held a test back: this run's 0, nothing to remember
            return Done(result, timeout=None, cacheable=False)
        timed_out = momentary or any(t.status == TIMEOUT for t in result.tests)
        return Done(result, timeout=False if timed_out else None, cacheable=not momentary)


def _as_result(run: ExecutionResult, expected: int) -> CodeResult:
    """A program that did not compile fails every test it was given."""
    tests = [CodeTestResult(status=t.status, time_ms=t.time_ms, stderr=t.stderr)
             for t in run.tests]
    passed = sum(t.status == PASSED for t in tests)
    total = max(len(tests), expected) if run.status != BAD_TESTS else len(tests)
    return CodeResult(score=0.0, passed=passed, total=total, status=run.status,
                      detail=run.detail, tests=tests)


def _score(result: CodeResult, all_or_nothing: bool) -> CodeResult:
    """Score from the counts; a dataset's broken tests, an outage or an item its request's
    budget left unrun are unscorable (null)."""
    if result.status in UNSCORABLE:
        return result.model_copy(update={"score": None})
    if result.total == 0:
        return result.model_copy(update={"score": 0.0})
    fraction = result.passed / result.total
    score = float(result.passed == result.total) if all_or_nothing else fraction
    return result.model_copy(update={"score": score})


def _cacheable(result: CodeResult) -> bool:
    """What the program decided is kept; what the machine or the moment decided is not."""
    return result.status not in UNCACHEABLE_ITEM and not any(
        t.status in UNCACHEABLE_TEST for t in result.tests)


_LANE_VERDICTS: LaneVerdicts[CodeResult] = LaneVerdicts(
    cacheable=_cacheable,
    remembered=lambda r, age_s: r.model_copy(update={"detail": (
        f"{r.detail or 'timed out'} (the same item, {age_s:.0f} s ago; remembered, "
        "not run again)")}),
)
