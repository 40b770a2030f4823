"""The ``reasoning_gym`` verifier: a completion scored by the reasoning-gym task's own
``score_answer``, in guarded worker processes (``guard``), in chunks.

An item's way: its answer is extracted here (``answers``); a result computed before for the
same (task, answer, entry) comes from the cache; the rest of a request's answers go to a
worker a chunk at a time (``chunk_items``), one slot of the fair gate each, so a batch of
256 costs a few hand-offs, not 256. A chunk that runs out of time (a scorer stuck on one
hostile answer) is run again one answer at a time, so only that answer times out (0).
"""

from __future__ import annotations

import asyncio
import json
import math
import pickle
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, model_validator, with_config
from typing_extensions import TypedDict  # pydantic reads its fields on Python 3.11

from reward_server import metrics
from reward_server.cache import ResultCache, TimeoutMemory
from reward_server.fair_queue import BudgetSpent, FairGate
from reward_server.process_pool import TimeoutPool
from reward_server.statuses import NOT_RUN, UNAVAILABLE
from reward_server.text import printable
from reward_server.verifiers.base import ItemBase, PooledVerifier, ResultBase
from reward_server.verifiers.reasoning_gym import library
from reward_server.verifiers.reasoning_gym.answers import ExtractMode, ThinkMode, answer_of
from reward_server.verifiers.reasoning_gym.settings import ReasoningGymSettings

INLINE_CHARS = 64 * 1024  # a request with more text has its answers extracted on a thread
# the task names the workers' library registers, learnt at start; empty: not known (yet)
KNOWN_TASKS: set[str] = set()


@with_config(ConfigDict(extra="allow"))
class Entry(TypedDict, total=False):
    """A dataset entry as the library produces it (``dataset[i]``). A dict, not a model: it
    goes to the scorer as it came, and building then dumping a model per item cost as much
    as the scoring."""

    question: str
    answer: Any
    metadata: dict[str, Any]


class ReasoningGymItem(ItemBase):
    response: str = Field(description="The model's completion.")
    entry: Entry | None = Field(None, description="The entry as reasoning-gym produced it: "
                                "{question, answer, metadata}. Or give its fields flat.")
    question: str | None = Field(None, description="The entry's question (flat form).")
    answer: Any = Field(None, description="The entry's answer (flat form; some tasks have "
                        "none: their scorer checks the answer against the metadata).")
    metadata: dict[str, Any] | None = Field(None, description="The entry's metadata (flat "
                                            "form; required there).")
    task: str | None = Field(None, description="The reasoning-gym task (dataset name); "
                             "default: the entry's metadata.source_dataset.")
    extract: ExtractMode = Field("answer_tag", description="Where the answer is: the last "
                                 "<answer>…</answer> (reasoning-gym's own prompts ask for "
                                 "it), the last \\boxed{…}, the last line, the last number "
                                 "(numeric tasks, a reply in prose), or the whole text.")
    think: ThinkMode = Field("strip", description="'strip': only text after the last "
                             "</think> is read; an unclosed <think> has no answer.")
    config: dict[str, Any] | None = Field(None, description="The config the entry's dataset "
                                          "was made with (its fields as JSON), where it is not "
                                          "the library's default: several scorers read it.")

    _task: str = PrivateAttr()
    _entry_key: str = PrivateAttr()
    _config_key: str = PrivateAttr()

    @model_validator(mode="after")
    def _one_entry(self) -> ReasoningGymItem:
        if self.entry is not None:
            if self.metadata is not None or self.answer is not None:
                raise ValueError("give 'entry', or its fields flat ('answer', 'metadata'), "
                                 "not both")
            entry = {"question": "", "answer": None, **self.entry}
            entry.setdefault("metadata", {})
        elif self.metadata is not None:
            entry = {"question": self.question or "", "answer": self.answer,
                     "metadata": self.metadata}
        else:
            raise ValueError("'entry' (or 'metadata', with 'answer') is required: the "
                             "task's scorer reads the entry")
        task = self.task or entry["metadata"].get("source_dataset")
        if not isinstance(task, str) or not task:
            raise ValueError("'task' is required when the entry's metadata names no "
                             "source_dataset")
        if KNOWN_TASKS and task not in KNOWN_TASKS:
            raise ValueError(f"unknown task {task!r}; known: {', '.join(sorted(KNOWN_TASKS))}")
        self._task = task
        # Keys of the cache and of a request's duplicates (G completions share an entry):
        # equal pickles are equal entries, and pickling parsed JSON costs a fifth of dumping
        # it with sorted keys (the same entry with its keys in another order is only a miss)
        self._entry_key = pickle.dumps(entry, protocol=5)
        self._config_key = "null" if self.config is None else json.dumps(
            self.config, sort_keys=True, default=str)
        return self


Status = Literal["ok", "no_answer", "error", "timeout", "bad_entry", "not_run", "unavailable"]


class ReasoningGymResult(ResultBase):
    score: float | None = Field(description="The task's own score in [0, 1] (some tasks "
                                "give partial credit); null for not_run, unavailable and "
                                "bad_entry (the scorer fails on the entry's own answer).")
    status: Status
    extracted: str | None = None
    detail: str | None = None


# (task, answer, the entry pickled, the config as canonical JSON): what a score depends on,
# and what a worker is handed (the pickle crosses as bytes, not pickled again)
Job = tuple[str, str, bytes, str]


def chunk_size(jobs: int, workers: int, most: int) -> int:
    """Answers per hand-off: a request's answers spread over every worker (a batch of 256
    on two workers is scored on two cores), ``most`` at a time."""
    return max(1, min(most, -(-jobs // max(1, workers))))


def _result(status: str, score: float, detail: str | None, extracted: str | None
            ) -> ReasoningGymResult:
    return ReasoningGymResult(score=None if math.isnan(score) else score, status=status,  # type: ignore[arg-type]
                              extracted=None if extracted is None else printable(extracted[:200]),
                              detail=detail)


class ReasoningGymVerifier(PooledVerifier):
    name = "reasoning_gym"
    item_model = ReasoningGymItem
    result_model = ReasoningGymResult
    description = "Any reasoning-gym task, scored by the library's own score_answer."
    settings_model = ReasoningGymSettings

    _missing: str | None = None

    async def start(self) -> None:
        config: ReasoningGymSettings = self.config  # type: ignore[assignment]
        self._pool = TimeoutPool(config.workers, config.memory_mb, library.warm_up,
                                 name="rgym-worker")
        self._gate = FairGate(self._pool.slots, self.name)
        self._cache: ResultCache[ReasoningGymResult] = ResultCache(self.settings.cache_size)
        self._timeouts: TimeoutMemory[ReasoningGymResult] = TimeoutMemory(
            self.settings.timeout_memory_s)
        names = await self._pool.run(library.task_names, timeout=120)
        if names.outcome == "ok":
            KNOWN_TASKS.update(names.value)
        else:  # the server runs on; every item says what to install
            self._missing = f"reasoning-gym is not installed ({names.detail}): " \
                            f"{library.EXTRA_HINT}"

    async def verify(self, items: Sequence[ReasoningGymItem]) -> list[ReasoningGymResult]:  # type: ignore[override]
        started = time.perf_counter()
        if sum(len(i.response) for i in items) > INLINE_CHARS:
            answers = await asyncio.to_thread(self._answers, items)
        else:
            answers = self._answers(items)
        results = await self._score(items, answers)
        elapsed = time.perf_counter() - started
        # counted once per request: a labelled inc() per item costs what a scorer does
        for status, count in Counter(result.status for result in results).items():
            metrics.ITEMS.labels(self.name, status).inc(count)
        latency = metrics.ITEM_LATENCY.labels(self.name)
        for _ in results:
            latency.observe(elapsed)
        return results

    @staticmethod
    def _answers(items: Sequence[ReasoningGymItem]) -> list[str | None]:
        return [answer_of(i.response, i.extract, i.think) for i in items]

    async def _score(self, items: Sequence[ReasoningGymItem], answers: list[str | None]
                     ) -> list[ReasoningGymResult]:
        out: list[ReasoningGymResult | None] = [None] * len(items)
        todo: dict[Job, list[int]] = {}
        hits = 0
        for k, (item, answer) in enumerate(zip(items, answers, strict=True)):
            if self._missing is not None:
                out[k] = _result(UNAVAILABLE, math.nan, self._missing, answer)
            elif answer is None:
                out[k] = _result("no_answer", 0.0, "no answer in the completion "
                                 f"(extract={item.extract!r})", None)
            else:
                job = (item._task, answer, item._entry_key, item._config_key)
                cached, hit = self._cache.peek(job)
                if hit:
                    hits += 1
                    out[k] = cached
                else:
                    todo.setdefault(job, []).append(k)
        metrics.CACHE_HITS.labels(self.name).inc(hits)
        jobs = list(todo)
        size = chunk_size(len(jobs), self._pool.slots if self._pool else 1,
                          self.config.chunk_items)  # type: ignore[union-attr]
        chunks = [jobs[i:i + size] for i in range(0, len(jobs), size)]
        for chunk, scored in zip(chunks, await asyncio.gather(*map(self._chunk, chunks)),
                                 strict=True):
            for job, result in zip(chunk, scored, strict=True):
                for k in todo[job]:
                    out[k] = result
        return out  # type: ignore[return-value]

    async def _chunk(self, jobs: list[Job]) -> list[ReasoningGymResult]:
        """The chunk's results; a chunk that did not finish runs again one job at a time."""
        if len(jobs) == 1 and (found := self._timeouts.get(jobs[0])) is not None:
            metrics.TIMEOUTS_REMEMBERED.labels(self.name).inc()
            value, age_s = found
            return [value.model_copy(update={"detail": f"{value.detail} (the same answer, "
                                             f"{age_s:.0f} s ago; remembered)"})]
        assert self._pool is not None, "ReasoningGymVerifier.start() was not awaited"
        try:
            async with self._gate.slot() as held:
                task = await self._pool.run(library.score_many, jobs,
                                            timeout=self.config.timeout_s)  # type: ignore[union-attr]
                held.cost_s = task.cost_s
        except BudgetSpent as exc:
            return [_result(NOT_RUN, math.nan, str(exc), job[1]) for job in jobs]
        if task.outcome == "ok":
            results = [_result(s, v, d, job[1]) for (s, v, d), job in zip(
                task.value, jobs, strict=True)]
            metrics.CACHE_MISSES.labels(self.name).inc(len(jobs))
            for job, result in zip(jobs, results, strict=True):
                self._cache.put(job, result)
            return results
        if task.outcome == UNAVAILABLE:  # the pool's loss: no answer's doing
            return [_result(UNAVAILABLE, math.nan, task.detail, job[1]) for job in jobs]
        if len(jobs) > 1:  # which answer it was: each alone, under its own limit
            return [r for one in await asyncio.gather(*(self._chunk([j]) for j in jobs))
                    for r in one]
        return [self._failed(jobs[0], task.outcome, task.detail, task.cpu_bound)]

    def _failed(self, job: Job, outcome: str, detail: str | None, cpu_bound: bool
                ) -> ReasoningGymResult:
        answer = job[1]
        if outcome == "timeout":
            metrics.TIMEOUTS.labels(self.name).inc()
            result = _result("timeout", 0.0, detail, answer)
            self._timeouts.put(job, result, certain=cpu_bound)
            return result
        # out of memory, or the scorer ended its worker: this answer's doing
        result = _result("error", 0.0, f"the task's scorer failed on this answer "
                         f"({outcome}): {detail}", answer)
        self._timeouts.put(job, result, certain=True)
        return result
