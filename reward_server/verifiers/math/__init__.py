"""The ``math`` verifier: final-answer extraction plus SymPy equivalence.

Extraction runs in the server process (linear scans, see ``extract``); parsing and
comparison run in a ``TimeoutPool`` of worker processes; results are cached on the
normalised (extracted answer, reference, options).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from reward_server import metrics
from reward_server.cache import ResultCache
from reward_server.process_pool import TaskResult, TimeoutPool
from reward_server.verifiers.base import ItemBase, ResultBase, Verifier
from reward_server.verifiers.math.check import Verdict, check, warm_up
from reward_server.verifiers.math.extract import ExtractMode, extract_answer, extract_gold
from reward_server.verifiers.math.values import normalize


class MathItem(ItemBase):
    response: str = Field(description="The model's completion, free-form.")
    answer: str = Field(description="Reference answer: bare, boxed, or after '####'.")
    extract: ExtractMode = Field(
        "auto",
        description="'auto': boxed, '####', 'the answer is', last $…$; 'boxed': only a "
        "boxed answer counts; 'last_number': 'auto', then the last bare number.",
    )
    tolerance: float | None = Field(
        None, ge=0, le=1,
        description="Relative tolerance for decimals; default from the server settings.",
    )


MathStatus = Literal["ok", "no_answer", "parse_error", "timeout"]


class MathResult(ResultBase):
    score: float
    correct: bool
    status: MathStatus
    extracted: str | None = None
    detail: str | None = None


class MathVerifier(Verifier):
    name = "math"
    item_model = MathItem
    result_model = MathResult
    description = "Final-answer equivalence for math problems (SymPy)."

    _pool: TimeoutPool | None = None

    async def start(self) -> None:
        s = self.settings
        self._pool = TimeoutPool(s.resolved_math_workers(), s.math_memory_mb, warm_up)
        self._cache: ResultCache[MathResult] = ResultCache(s.cache_size)

    async def stop(self) -> None:
        if self._pool is not None:
            await asyncio.to_thread(self._pool.close)
            self._pool = None

    async def verify(self, items: Sequence[MathItem]) -> list[MathResult]:  # type: ignore[override]
        return list(await asyncio.gather(*(self._verify_one(item) for item in items)))

    async def _verify_one(self, item: MathItem) -> MathResult:
        started = time.perf_counter()
        extracted = extract_answer(item.response, item.extract)
        if extracted is None:
            result = MathResult(
                score=0.0, correct=False, status="no_answer",
                detail="no \\boxed{}, '####', 'answer is' or $…$ answer found",
            )
        elif len(extracted) > self.settings.math_max_answer_chars:
            result = MathResult(
                score=0.0, correct=False, status="parse_error", extracted=extracted[:200],
                detail=f"answer longer than {self.settings.math_max_answer_chars} characters",
            )
        else:
            gold = extract_gold(item.answer)
            tolerance = self.settings.math_tolerance if item.tolerance is None else item.tolerance
            key = (normalize(extracted), normalize(gold), tolerance)
            result, hit = await self._cache.get_or_compute(
                key,
                lambda: self._compare(extracted, gold, tolerance),
                cacheable=lambda r: r.status != "timeout",
            )
            (metrics.CACHE_HITS if hit else metrics.CACHE_MISSES).labels(self.name).inc()
            if result.extracted != extracted:
                result = result.model_copy(update={"extracted": extracted})
        metrics.ITEMS.labels(self.name, result.status).inc()
        metrics.ITEM_LATENCY.labels(self.name).observe(time.perf_counter() - started)
        return result

    async def _compare(self, extracted: str, gold: str, tolerance: float) -> MathResult:
        assert self._pool is not None, "MathVerifier.start() was not awaited"
        task: TaskResult = await self._pool.run(
            check, extracted, gold, tolerance, timeout=self.settings.math_timeout_s
        )
        if task.outcome == "timeout":
            metrics.TIMEOUTS.labels(self.name).inc()
            return MathResult(score=0.0, correct=False, status="timeout",
                              extracted=extracted, detail=task.detail)
        if task.outcome != "ok":
            return MathResult(score=0.0, correct=False, status="parse_error",
                              extracted=extracted, detail=task.detail)
        verdict: Verdict = task.value
        return MathResult(
            score=1.0 if verdict.correct else 0.0, correct=verdict.correct,
            status=verdict.status, extracted=extracted, detail=verdict.detail,
        )
