"""The ``math`` verifier: final-answer extraction, a numeric fast path, math-verify.

An item goes through, in order (each step a separate function, so a scheduler can answer
cheap items without waiting for a pool worker):

1. ``triage`` (server process, microseconds): extract the answer (``extract``); no answer
   or an over-long one is a verdict already; two plain numbers are compared by the fast path
   (``numbers``). What is left is a ``PoolJob``.
2. ``run_job``: the slow lane (``reward_server.slow_lane``: the result cache keyed on
   (answer, reference, tolerance), remembered timeouts, the fair gate), and on a miss the
   comparison (``check``: math-verify plus our tolerance and equation layers) in a
   ``TimeoutPool`` worker under a hard timeout and memory cap.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Literal, TypeVar

from pydantic import Field, field_validator

from reward_server import metrics
from reward_server.fair_thread import FairThread
from reward_server.process_pool import TaskResult, TimeoutPool
from reward_server.slow_lane import Done, LaneVerdicts, SlowLane, Turn
from reward_server.statuses import NOT_RUN, UNAVAILABLE
from reward_server.text import printable
from reward_server.verifiers.base import ItemBase, PooledVerifier, ResultBase
from reward_server.verifiers.math.check import check, warm_up
from reward_server.verifiers.math.commit import (
    MARKERS,
    Marker,
    NoCommitment,
    ThinkMode,
    committed_answer,
)
from reward_server.verifiers.math.extract import extract_gold
from reward_server.verifiers.math.forms import written_forms
from reward_server.verifiers.math.guards import restates_question
from reward_server.verifiers.math.markers import Answer, ExtractMode
from reward_server.verifiers.math.numbers import EXACT, fast_check
from reward_server.verifiers.math.settings import MathSettings
from reward_server.verifiers.math.verdict import Verdict

RESTATED = "the question's own expression, copied: an answer states what it equals"
T = TypeVar("T")
INLINE_TRIAGE_CHARS = 8192  # a larger request is triaged on a thread (a few ms of worst case)
TRIAGE_SLICE_CHARS = 256 * 1024  # per hand-off to the thread
TRIAGE_SLICE_ITEMS = 256
# one: the interpreter runs one thread at a time anyway, and two busy ones pass it between
# themselves while the event loop waits for it; its own pool, so that a megabyte batch never
# queues the default executor's other users (the pool's close, blocking I/O)
_TRIAGE_THREAD = FairThread("math-triage")
# what an empty reference is made of: spaces, '#', '$', empty boxes; any other character
# says it is not, found at C speed (this runs on the event loop, on up to 2 MiB)
_EMPTY_REFERENCE = re.compile(r"(?:\s|#|\$|\\(?:boxed|fbox)\s*\{\s*\})*")
_NOT_EMPTY = re.compile(r"[^\s#$\\boxedf{}]")


class MathItem(ItemBase):
    response: str = Field(description="The model's completion, free-form.")
    answer: str = Field(
        description="Reference answer: bare LaTeX, boxed, after '####', or a worked solution."
    )
    extract: ExtractMode = Field(
        "auto",
        description="Which statement is the committed answer (docs/math.md). 'auto': the "
        "last box (several adjacent boxes form one list), 'final answer is $x$', '####', a "
        "bolded final line, else math-verify's reading of the end of the text ('answer: x', "
        "the last $…$, the last number) when the text ends as a sentence ends. 'marked': as "
        "'auto' without the last bare number. 'boxed': only a boxed answer counts. "
        "'last_number': same as 'auto' (kept for old clients).",
    )
    think: ThinkMode = Field(
        "strip",
        description="'strip': only the text after the last </think> is read, and a <think> "
        "that never closes commits to no answer. 'keep': the whole text is read.",
    )
    markers: list[Marker] = Field(
        default_factory=lambda: list(MARKERS),
        description="The answer markers that count: 'answer_tag' (the last <answer>…</answer>), "
        "'boxed', 'final_answer' (Minerva's "
        "'final answer is $x$'), 'hashes' (GSM8K's '#### x'), 'bold' (a bolded final line).",
    )
    truncated: bool | None = Field(
        None,
        description="Whether the length limit cut the completion (the trainer knows). true: "
        "only a marked answer that closes before the cut counts, never the prose it runs "
        "into. false: it ended where the model stopped, so its last number counts however "
        "the text ends. Not sent: a text that stops mid-sentence is taken as cut.",
    )
    tolerance: float | None = Field(
        None, ge=0, le=1,
        description="Relative tolerance for decimals; default from the server settings.",
    )
    question: str | None = Field(
        None, max_length=100_000,
        description="The problem the completion answers (optional, as TRL and veRL hand the "
        "prompt to reward functions). A stated answer that copies one of its math expressions "
        "($\\sqrt{50}$ for 'Simplify $\\sqrt{50}$') scores 0: math-verify finds the question "
        "equal to its answer.",
    )

    @field_validator("answer")
    @classmethod
    def _reference_states_something(cls, answer: str) -> str:
        """An empty reference (``""``, ``"#### "``, ``"$$"``, ``"\\boxed{}"``) is the dataset's
        fault: a 422 naming the field, not a 0 the completion would be given."""
        if _NOT_EMPTY.search(answer) is None and _EMPTY_REFERENCE.fullmatch(answer):
            raise ValueError("the reference answer is empty")
        return answer


# "timeout": the comparison ran out of time (0); "not_run": its request's budget left it
# waiting for a worker (null); "unavailable": killed from outside its worker again and again
# (null: not the response's doing)
MathStatus = Literal["ok", "no_answer", "parse_error", "timeout", "not_run", "unavailable"]


class MathResult(ResultBase):
    score: float | None = Field(
        description="1 or 0; null only for an item its request's budget left unrun (status "
        "'not_run'), or one the server could not run (status 'unavailable').")
    correct: bool
    status: MathStatus
    extracted: str | None = None
    detail: str | None = None

    @field_validator("extracted", "detail")
    @classmethod
    def _printable(cls, text: str | None) -> str | None:
        """Candidate text echoed back: a lone surrogate must not fail the whole batch."""
        return None if text is None else printable(text)


def _chars(item: MathItem) -> int:
    return len(item.response) + len(item.answer) + len(item.question or "")


def _slices(items: Sequence[MathItem]) -> Iterator[Sequence[MathItem]]:
    """``items`` in slices of about ``TRIAGE_SLICE_CHARS`` of text (tens of milliseconds of
    worst-case triage each): one hand-off to the thread per slice, not per item."""
    start, chars = 0, 0
    for end, item in enumerate(items, 1):
        chars += _chars(item)
        if chars >= TRIAGE_SLICE_CHARS or end - start >= TRIAGE_SLICE_ITEMS:
            yield items[start:end]
            start, chars = end, 0
    if start < len(items):
        yield items[start:]


async def _ready(value: T) -> T:
    return value


async def _nth(results: Awaitable[list[T]], k: int) -> T:
    return (await results)[k]


@dataclass(frozen=True)
class PoolJob:
    """An item that needs a worker: its answer, its reference and the tolerances."""

    pred: Answer
    gold: Answer
    tolerance: float  # a decimal against a decimal reference
    exact_tolerance: float = EXACT  # a decimal alone against an exact reference

    @cached_property
    def key(self) -> str:
        """What the lane's cache and memories keep of the job: a digest, never the texts (a
        reference may be a worked solution of megabytes, which 100,000 cached entries
        would otherwise each hold). Made where the job is (``triage``: on a thread for a
        large request), as its digest costs what the texts weigh."""
        return hashlib.sha256(repr(self).encode("utf-8", "surrogatepass")).hexdigest()


def _result(verdict: Verdict, extracted: str | None) -> MathResult:
    return MathResult(
        score=1.0 if verdict.correct else 0.0, correct=verdict.correct, status=verdict.status,
        extracted=verdict.extracted or extracted, detail=verdict.detail,
    )


class MathVerifier(PooledVerifier):
    name = "math"
    item_model = MathItem
    result_model = MathResult
    description = "Final-answer equivalence for math problems (math-verify + SymPy)."
    settings_model = MathSettings  # read as settings.math_<field>, or config.<field>
    libraries = ("math-verify", "latex2sympy2_extended", "antlr4-python3-runtime", "sympy")
    capacity_settings = frozenset({"workers"})

    async def start(self) -> None:
        config: MathSettings = self.config  # type: ignore[assignment]
        self._pool = TimeoutPool(config.resolved_workers(), config.memory_mb, warm_up,
                                 name="math-worker")
        self._pool.prestart()  # warm while the server waits for its first request
        self._lane: SlowLane[MathResult] = SlowLane(
            self.name, self._pool.slots, self.settings.cache_size,
            self.settings.timeout_memory_s, _LANE_VERDICTS)

    async def verify(self, items: Sequence[MathItem]) -> list[MathResult]:  # type: ignore[override]
        """Each item's result. A group of G completions repeats answers (the same right
        answer, the same wrong ones, verbatim copies): a job that occurs several times in
        one request runs once, whether or not the result cache is on. The comparison is a
        pure function of the job, so each copy gets the verdict it would get alone."""
        shared: dict[PoolJob, asyncio.Future[MathResult]] = {}
        return list(await asyncio.gather(*(self._verify_one(triaged, shared)
                                           for triaged in self._triaged(items))))

    async def _verify_one(self, triaged: Awaitable[MathResult | PoolJob],
                          shared: dict[PoolJob, asyncio.Future[MathResult]]) -> MathResult:
        verdict_or_job = await triaged
        if isinstance(verdict_or_job, MathResult):
            result = verdict_or_job
        else:
            job = shared.get(verdict_or_job)
            if job is None:
                job = shared[verdict_or_job] = asyncio.ensure_future(self.run_job(verdict_or_job))
            else:  # not computed afresh: a hit, as a copy coalesced in the cache is
                metrics.CACHE_HITS.labels(self.name).inc()
            result = await job
        return result

    def _triaged(self, items: Sequence[MathItem]) -> list[Awaitable[MathResult | PoolJob]]:
        """Each item's ``triage``, inline for a request with at most ``INLINE_TRIAGE_CHARS``
        of text, else on a thread, a slice of items per hand-off. The scans are linear, yet
        a field at the size limit can cost a few hundred milliseconds of Python (2 MiB of
        ``\\frac{``, each brace a step), and a batch's items all start in one turn of the
        event loop (2,500 small ones of 2 ms each held it 5.8 s): neither the loop nor
        another request should wait for that. A thread lets the loop in every few
        milliseconds (the interpreter's switch interval), and the callers take it in turn
        (``FairThread``). A small request costs microseconds, less than the hand-off, and
        never queues behind a large one."""
        if sum(map(_chars, items)) <= INLINE_TRIAGE_CHARS:
            return [_ready(self.triage(item)) for item in items]
        out: list[Awaitable[MathResult | PoolJob]] = []
        for piece in _slices(items):  # queued in order, each taking its caller's turns
            done = asyncio.ensure_future(_TRIAGE_THREAD.run(self._triage_all, piece))
            out += [_nth(done, k) for k in range(len(piece))]
        return out

    def _triage_all(self, items: Sequence[MathItem]) -> list[MathResult | PoolJob]:
        return [self.triage(item) for item in items]

    def triage(self, item: MathItem) -> MathResult | PoolJob:
        """The verdict when it needs no worker (no answer, too long, two plain numbers),
        else the job for one. Synchronous and cheap: linear scans and Fractions."""
        pred = committed_answer(item.response, item.extract, item.think, item.markers,
                                item.truncated)
        if isinstance(pred, NoCommitment):
            return MathResult(score=0.0, correct=False, status=pred.status, detail=pred.detail)
        limit = self.settings.math_max_answer_chars
        if pred.kind == "latex" and len(pred.text) > limit:
            return MathResult(score=0.0, correct=False, status="parse_error",
                              extracted=pred.text[:200],
                              detail=f"answer longer than {limit} characters")
        gold = extract_gold(item.answer)
        if item.question and pred.kind == "latex" and any(
                restates_question(form, item.question, item.answer)
                for answer in pred.items for form in (answer, *written_forms(answer))):
            return MathResult(score=0.0, correct=False, status="ok", extracted=pred.text[:200],
                              detail=RESTATED)
        tolerance = self.settings.math_tolerance if item.tolerance is None else item.tolerance
        # an approximation alone for an exact reference is no answer unless the item asks
        exact = EXACT if item.tolerance is None else item.tolerance
        fast = fast_check(pred, gold, tolerance, exact)
        if fast is not None:
            return _result(fast, pred.text)
        job = PoolJob(pred, gold, tolerance, exact)
        job.key  # noqa: B018 - made here, where triage runs, not on the loop in run_job
        return job

    async def run_job(self, job: PoolJob) -> MathResult:
        """The cached verdict, or the worker's when the lane gives this request its turn
        (identical jobs in flight run once). A job its request's budget left unrun is
        unscorable (null, ``not_run``), not a 0 it did not earn."""
        extracted = job.pred.text if job.pred.kind == "latex" else None
        return await self._lane.run(
            job.key, lambda turn: self._compare(job, turn),
            not_run=lambda reason: MathResult(score=None, correct=False, status=NOT_RUN,
                                              extracted=extracted, detail=reason))

    async def _compare(self, job: PoolJob, turn: Turn) -> Done[MathResult]:
        assert self._pool is not None, "MathVerifier.start() was not awaited"
        extracted = job.pred.text if job.pred.kind == "latex" else None
        async with turn.slot() as held:
            task: TaskResult = await self._pool.run(
                check, job.pred, job.gold, job.tolerance, job.exact_tolerance,
                timeout=self.settings.math_timeout_s)
            held.cost_s = task.cost_s  # its own work, not a replacement worker's start
        if task.outcome == "timeout":
            metrics.TIMEOUTS.labels(self.name).inc()
            return Done(MathResult(score=0.0, correct=False, status="timeout",
                                   extracted=extracted, detail=task.detail),
                        timeout=task.cpu_bound)
        if task.outcome == UNAVAILABLE:  # the pool's loss, not the response's doing
            return Done(MathResult(score=None, correct=False, status=UNAVAILABLE,
                                   extracted=extracted, detail=task.detail))
        if task.outcome != "ok":  # memory, or a comparison that crashed its worker
            return Done(MathResult(score=0.0, correct=False, status="parse_error",
                                   extracted=extracted, detail=task.detail),
                        timeout=True if task.outcome == "memory" else None)
        return Done(_result(task.value, extracted))


_LANE_VERDICTS: LaneVerdicts[MathResult] = LaneVerdicts(
    cacheable=lambda r: r.status not in ("timeout", UNAVAILABLE),
    remembered=lambda r, age_s: r.model_copy(update={"detail": (
        f"{r.detail} (the same task, {age_s:.0f} s ago; remembered, not run again)")}),
)
