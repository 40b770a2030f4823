"""The ``code`` verifier: run the completion's program against test cases in the Docker
sandbox (``sandbox/``). A plug-in like any other: it owns its settings
(``REWARD_SERVER_SANDBOX_*``), its schemas and the sandbox's lifetime.

Two item forms: stdin/stdout ``tests``, or Python ``test_code`` + ``entry_point``
(HumanEval/MBPP). If the engine or the image is missing, the server still starts; code items
then come back ``sandbox_unavailable`` with a null score and the command to run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from reward_server import metrics
from reward_server.cache import ResultCache, TimeoutMemory
from reward_server.fair_queue import BudgetSpent, FairGate
from reward_server.verifiers.base import ItemBase, ResultBase, Verifier
from reward_server.verifiers.code.extract import extract_code
from sandbox import (
    LANGUAGES,
    Execution,
    ExecutionResult,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    TestCase,
)
from sandbox.seccomp import security_opt

SPARE_CONTAINERS = 1  # per engine, beyond pool_size (see CodeVerifier.start)


class SandboxSettings(BaseSettings):
    """``REWARD_SERVER_SANDBOX_<FIELD>``; see ``sandbox.config.SandboxConfig`` for each."""

    model_config = SettingsConfigDict(env_prefix="REWARD_SERVER_SANDBOX_", env_file=".env",
                                      extra="ignore")
    image: str = SandboxConfig.image
    docker_host: str | None = None
    docker_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Several Docker engines, comma-separated "
        "(unix:///var/run/docker.sock,tcp://10.0.0.2:2376): pool_size containers on each.")
    pool_size: int = Field(SandboxConfig.pool_size, ge=1)
    max_uses: int = Field(SandboxConfig.max_uses, ge=1)
    memory_mb: int = Field(SandboxConfig.memory_mb, ge=64)
    cpus: float = Field(SandboxConfig.cpus, gt=0)
    pids_limit: int = Field(SandboxConfig.pids_limit, ge=16)
    default_time_limit_s: float = Field(SandboxConfig.default_time_limit_s, gt=0)
    max_time_limit_s: float = Field(SandboxConfig.max_time_limit_s, gt=0)
    default_memory_mb: int = Field(SandboxConfig.default_memory_mb, ge=32)
    max_memory_mb: int = Field(SandboxConfig.max_memory_mb, ge=32)
    output_limit_bytes: int = Field(SandboxConfig.output_limit_bytes, ge=1024)
    acquire_timeout_s: float = Field(SandboxConfig.acquire_timeout_s, gt=0)
    item_budget_s: float = Field(SandboxConfig.item_budget_s, gt=0, le=600, description=(
        "Wall-clock budget of one item, compile and all tests: tests it leaves unrun time out."))
    reap_interval_s: float = Field(SandboxConfig.reap_interval_s, gt=0)
    runtime: str | None = Field(None, description="OCI runtime registered with the engine, "
                                "e.g. runsc (gVisor); unset: the engine's default (runc).")
    seccomp_profile: str = Field("", description="Seccomp profile JSON; unset: "
                                 "sandbox/seccomp.json; engine-default: the engine's own.")

    @field_validator("docker_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [h.strip() for h in value.split(",") if h.strip()]
        return value

    @field_validator("seccomp_profile")
    @classmethod
    def _readable_profile(cls, value: str) -> str:
        security_opt(value)  # a missing or malformed file stops the start, naming the path
        return value

    def config(self) -> SandboxConfig:
        return SandboxConfig(**{**self.model_dump(), "docker_hosts": tuple(self.docker_hosts)})


class StdioTest(BaseModel):
    input: str = ""
    output: str


class CodeItem(ItemBase):
    response: str = Field(description="The completion; its last fenced code block is run.")
    language: str = Field("python", description=f"One of: {', '.join(LANGUAGES)}.")
    tests: list[StdioTest] | None = Field(
        None, description="stdin/stdout cases; output compared line by line.")
    test_code: str | None = Field(
        None, description="Python asserts, or a check(candidate) function (HumanEval).")
    entry_point: str | None = Field(None, description="The function test_code calls.")
    tolerance: float | None = Field(
        None, ge=0, description="Numeric tolerance for stdin/stdout tokens (abs and rel).")
    time_limit_s: float | None = Field(
        None, gt=0, description="Per test; clamped to the server's maximum.")
    memory_mb: int | None = Field(None, gt=0, description="Clamped to the server's maximum.")
    all_or_nothing: bool = Field(False, description="Score 1 only if every test passes; the "
                                 "run stops at the first failure (later tests: skipped).")

    @model_validator(mode="after")
    def _one_form(self) -> CodeItem:
        if self.language not in LANGUAGES:
            raise ValueError(f"unknown language {self.language!r}; known: "
                             f"{', '.join(LANGUAGES)}")
        if (self.tests is None) == (self.test_code is None):
            raise ValueError("give either 'tests' (stdin/stdout) or 'test_code' with "
                             "'entry_point' (assertions), not both or neither")
        if self.tests is not None and not self.tests:
            raise ValueError("'tests' is empty")
        if self.test_code is not None:
            if not LANGUAGES[self.language].supports_assertions:
                raise ValueError(f"test_code is supported for python only, not "
                                 f"{self.language!r}")
            if not self.entry_point or not self.entry_point.isidentifier():
                raise ValueError("'entry_point' (a function name) is required with test_code")
        return self


# "timeout": the item never ran, its request's budget ran out first (score null)
CodeStatus = Literal["ok", "no_code", "syntax_error", "compile_error", "bad_tests",
                     "sandbox_unavailable", "timeout"]
TestStatus = Literal["passed", "wrong_answer", "timeout", "runtime_error", "memory_limit",
                     "output_limit", "skipped"]


class CodeTestResult(BaseModel):
    status: TestStatus
    time_ms: float
    stderr: str = Field("", description="The tail of the program's stderr.")


class CodeResult(ResultBase):
    score: float | None
    passed: int
    total: int
    status: CodeStatus
    detail: str | None = None
    tests: list[CodeTestResult] = Field(default_factory=list)


class CodeVerifier(Verifier):
    name = "code"
    item_model = CodeItem
    result_model = CodeResult
    description = "Runs the program against test cases in a Docker sandbox."

    async def start(self) -> None:
        config = SandboxSettings().config()
        # One warm container per engine more than items run at once: a container that a
        # timed-out program spoiled takes seconds to replace, and the next item (often
        # another request's) takes the spare meanwhile. Whose turn it is: the gate.
        self.sandbox = Sandbox(replace(config, pool_size=config.pool_size + SPARE_CONTAINERS))
        await self.sandbox.start()
        self._cache: ResultCache[CodeResult] = ResultCache(self.settings.cache_size)
        self._gate = FairGate(config.pool_size * len(self.sandbox.pool.pools), self.name)
        self._timeouts: TimeoutMemory[CodeResult] = TimeoutMemory(
            self.settings.timeout_memory_s)

    async def stop(self) -> None:
        await self.sandbox.stop()

    async def verify(self, items: Sequence[CodeItem]) -> list[CodeResult]:  # type: ignore[override]
        return list(await asyncio.gather(*(self._verify_one(i) for i in items)))

    async def _verify_one(self, item: CodeItem) -> CodeResult:
        started = time.perf_counter()
        source = extract_code(item.response)
        total = len(item.tests) if item.tests is not None else None
        if not source.strip():
            result = CodeResult(score=0.0, passed=0, total=total or 0, status="no_code",
                                detail="the response contains no code")
        else:
            execution = Execution(
                language=item.language, source=source,
                tests=tuple(TestCase(t.input, t.output, item.tolerance)
                            for t in item.tests or ()),
                test_code=item.test_code, entry_point=item.entry_point,
                time_limit_s=item.time_limit_s, memory_mb=item.memory_mb,
                stop_on_failure=item.all_or_nothing,
            )
            key = hashlib.sha256(json.dumps(
                [execution.language, source, [t.__dict__ for t in execution.tests],
                 execution.test_code, execution.entry_point, execution.time_limit_s,
                 execution.memory_mb, execution.stop_on_failure],
                ensure_ascii=True).encode()).hexdigest()
            result = _score(await self._cached_run(key, execution), item.all_or_nothing)
        if any(t.status == "timeout" for t in result.tests):
            metrics.TIMEOUTS.labels(self.name).inc()
        metrics.ITEMS.labels(self.name, result.status).inc()
        metrics.ITEM_LATENCY.labels(self.name).observe(time.perf_counter() - started)
        return result

    async def _cached_run(self, key: str, execution: Execution) -> CodeResult:
        """The cache, or a container when the gate gives this request its turn. An item
        its request's budget left unrun is unscorable: it did not cause that."""
        try:
            run, hit = await self._cache.get_or_compute(
                key, lambda: self._run(key, execution), cacheable=_cacheable)
        except BudgetSpent as exc:
            return CodeResult(score=None, passed=0, total=execution.test_count,
                              status="timeout", detail=str(exc))
        (metrics.CACHE_HITS if hit else metrics.CACHE_MISSES).labels(self.name).inc()
        return run

    def _remembered(self, key: str) -> CodeResult | None:
        """The same program and tests timed out a moment ago: so will this copy."""
        found = self._timeouts.get(key)
        if found is None:
            return None
        run, age_s = found
        metrics.TIMEOUTS_REMEMBERED.labels(self.name).inc()
        return run.model_copy(update={"detail": f"{run.detail or 'timed out'} (the same item, "
                                      f"{age_s:.0f} s ago; remembered, not run again)"})

    async def _run(self, key: str, execution: Execution) -> CodeResult:
        if (remembered := self._remembered(key)) is not None:
            return remembered
        async with self._gate.slot():
            if (remembered := self._remembered(key)) is not None:  # a copy, while we waited
                return remembered
            try:
                run = await self.sandbox.execute(execution)
            except SandboxUnavailable as exc:
                return CodeResult(score=None, passed=0, total=execution.test_count,
                                  status="sandbox_unavailable", detail=str(exc))
        result = _as_result(run, execution.test_count)
        if any(t.status == "timeout" for t in result.tests):
            self._timeouts.put(key, result)
        return result


def _as_result(run: ExecutionResult, expected: int) -> CodeResult:
    """A program that did not compile fails every test it was given."""
    tests = [CodeTestResult(status=t.status, time_ms=t.time_ms, stderr=t.stderr)  # type: ignore[arg-type]
             for t in run.tests]
    passed = sum(t.status == "passed" for t in tests)
    total = max(len(tests), expected) if run.status != "bad_tests" else len(tests)
    return CodeResult(score=0.0, passed=passed, total=total, status=run.status,  # type: ignore[arg-type]
                      detail=run.detail, tests=tests)


def _score(result: CodeResult, all_or_nothing: bool) -> CodeResult:
    """Score from the counts; a dataset's broken tests, an outage or an item its request's
    budget left unrun are unscorable (null)."""
    if result.status in ("sandbox_unavailable", "bad_tests", "timeout"):
        return result.model_copy(update={"score": None})
    if result.total == 0:
        return result.model_copy(update={"score": 0.0})
    fraction = result.passed / result.total
    score = float(result.passed == result.total) if all_or_nothing else fraction
    return result.model_copy(update={"score": score})


def _cacheable(result: CodeResult) -> bool:
    return result.status != "sandbox_unavailable" and not any(
        t.status in ("timeout", "memory_limit") for t in result.tests)
