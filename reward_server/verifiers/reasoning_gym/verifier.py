"""The ``reasoning_gym`` verifier: a completion scored by the reasoning-gym task's own
``score_answer``, in the sandbox (``backends``), in chunks.

An item's way: its answer is extracted here (``answers``: string scanning, nothing
evaluated); a result computed before for the same caller and (task, answer, entry) comes from
the cache; the rest of a request's answers go to the sandbox a chunk at a time
(``chunk_items``), one slot of the sandbox service's fair gate each, so a batch of 256 costs a
few hand-offs, not 256. In the container each chunk is scored by a process of its own under
the candidate's uid; an answer that runs past ``timeout_s`` times out alone (0) and the rest
of its chunk is scored; a chunk's turn ends after ``sandbox_service.TURN_S`` and the rest waits for
the gate again.

The cache and the remembered timeouts are the slow lane's (``slow_lane.SlowLane.run_batch``),
keyed per caller: a scorer that a hostile answer took over can forge the results of its own
chunk (the items of one request), and those must not be served to anyone else.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import pickle
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, model_validator, with_config
from typing_extensions import TypedDict  # pydantic reads its fields on Python 3.11

from reward_server import metrics
from reward_server.fair_queue import BudgetSpent, current_request
from reward_server.process_pool import CPU_BOUND
from reward_server.sandbox_service import SandboxService
from reward_server.slow_lane import Done, LaneVerdicts, SlowLane
from reward_server.statuses import NOT_RUN, UNAVAILABLE
from reward_server.text import printable
from reward_server.verifiers.base import ItemBase, ResultBase, Verifier
from reward_server.verifiers.reasoning_gym.answers import ExtractMode, ThinkMode, answer_of
from reward_server.verifiers.reasoning_gym.backends import (
    Backend,
    HostScoring,
    Job,
    SandboxScoring,
    Unbound,
)
from reward_server.verifiers.reasoning_gym.settings import ReasoningGymSettings
from reward_server.verifiers.reasoning_gym.tasks import TASKS
from sandbox.scoring import Scored

INLINE_CHARS = 64 * 1024  # a request with more text has its answers extracted on a thread
KNOWN_TASKS = TASKS  # the pinned library's (the image's); the host never imports it
NO_SANDBOX = "the code verifier's sandbox is not loaded, and reasoning_gym scores in it " \
             "(host_scoring, for a trusted setup without Docker, scores on the host)"


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
    _entry: dict[str, Any] = PrivateAttr()
    _entry_key: bytes = PrivateAttr()
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
        self._entry = entry
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


# (caller, task, answer, entry pickled, config): an answer's identity; results are a caller's own
Key = tuple[Hashable, str, str, bytes, str]


def stored_key(key: Key) -> tuple[Hashable, bytes]:
    """What the cache and the timeouts' memory keep of ``key``: its caller and a digest of
    the rest, never the answer and the entry themselves (megabytes each: a cache of 100,000
    entries would otherwise hold whatever a caller sends)."""
    caller, task, answer, entry, config = key
    digest = hashlib.sha256()
    for part in (task.encode(), answer.encode("utf-8", "surrogatepass"), entry,
                 config.encode("utf-8", "surrogatepass")):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return caller, digest.digest()


def chunk_size(jobs: int, workers: int, most: int) -> int:
    """Answers per hand-off: a request's answers spread over every container (a batch of 256
    on two is scored on two cores), ``most`` at a time."""
    return max(1, min(most, -(-jobs // max(1, workers))))


def _result(status: str, score: float | None, detail: str | None, extracted: str | None
            ) -> ReasoningGymResult:
    if score is not None and math.isnan(score):
        score = None
    return ReasoningGymResult(score=score, status=status,  # type: ignore[arg-type]
                              extracted=None if extracted is None else printable(extracted[:200]),
                              detail=detail)


class ReasoningGymVerifier(Verifier):
    name = "reasoning_gym"
    item_model = ReasoningGymItem
    result_model = ReasoningGymResult
    description = "Any reasoning-gym task, scored by the library's own score_answer."
    settings_model = ReasoningGymSettings
    null_statuses = frozenset({"bad_entry"})  # the task's scorer fails on its own answer
    libraries = ("reasoning-gym",)
    capacity_settings = frozenset({"workers", "chunk_items"})
    config: ReasoningGymSettings

    _backend: Backend = Unbound("the reasoning_gym verifier has not started")
    _sandbox: SandboxService | None = None

    def use_sandbox(self, sandbox: SandboxService | None) -> None:
        self._sandbox = sandbox

    async def start(self) -> None:
        if self.config.host_scoring:
            backend = HostScoring(self.config)
            self._backend = backend
            await backend.start()
        elif self._sandbox is not None:
            # behind the sandbox's fair gate: reasoning_gym's chunks share the containers
            # with code items and /run_code, by time
            self._backend = SandboxScoring(self._sandbox, self.config)
        else:
            self._backend = Unbound(NO_SANDBOX)
        self._lane: SlowLane[ReasoningGymResult] = SlowLane(
            self.name, self._backend.gate, self.settings.cache_size,
            self.settings.timeout_memory_s, _LANE_VERDICTS)

    async def stop(self) -> None:
        await self._backend.stop()

    async def verify(self, items: Sequence[ReasoningGymItem]) -> list[ReasoningGymResult]:  # type: ignore[override]
        if sum(len(i.response) for i in items) > INLINE_CHARS:
            answers = await asyncio.to_thread(self._answers, items)
        else:
            answers = self._answers(items)
        return await self._score(items, answers)

    @staticmethod
    def _answers(items: Sequence[ReasoningGymItem]) -> list[str | None]:
        return [answer_of(i.response, i.extract, i.think) for i in items]

    async def _score(self, items: Sequence[ReasoningGymItem], answers: list[str | None]
                     ) -> list[ReasoningGymResult]:
        request = current_request()
        caller = request.caller if request is not None else None
        out: list[ReasoningGymResult | None] = [None] * len(items)
        keys: dict[Hashable, Key] = {}  # what the lane keeps of an answer's identity: it
        entries: dict[Key, dict[str, Any]] = {}  # the entries as parsed, for the jobs
        scored_at, stored = [], []
        missing = self._backend.missing
        for k, (item, answer) in enumerate(zip(items, answers, strict=True)):
            if missing is not None:
                out[k] = _result(UNAVAILABLE, None, missing, answer)
            elif answer is None:
                out[k] = _result("no_answer", 0.0, "no answer in the completion "
                                 f"(extract={item.extract!r})", None)
            else:
                key = (caller, item._task, answer, item._entry_key, item._config_key)
                keys[stored_key(key)] = key
                entries.setdefault(key, item._entry)
                scored_at.append(k)
                stored.append(stored_key(key))
        results = await self._lane.run_batch(
            stored, lambda todo: self._scored([keys[s] for s in todo], entries))
        for k, result in zip(scored_at, results, strict=True):
            out[k] = result
        return out  # type: ignore[return-value]

    async def _scored(self, keys: list[Key], entries: Mapping[Key, dict[str, Any]]
                      ) -> list[Done[ReasoningGymResult]]:
        """``keys`` scored in chunks spread over the workers, in order."""
        size = chunk_size(len(keys), self._backend.slots, self.config.chunk_items)
        chunks = [keys[i:i + size] for i in range(0, len(keys), size)]
        done = await asyncio.gather(*(self._chunk(chunk, entries) for chunk in chunks))
        return [one for chunk in done for one in chunk]

    async def _chunk(self, keys: list[Key], entries: Mapping[Key, dict[str, Any]],
                     first: bool = True) -> list[Done[ReasoningGymResult]]:
        """The chunk's results: what its turn scored, then the rest in turns of its own
        (``first``: only the first waits under the request's budget; the rest were handed
        over already, and a cut would make them null for the caller's own slow answers)."""
        jobs: list[Job] = [(key[1], key[2], entries[key], key[4]) for key in keys]
        try:
            async with self._backend.gate.slot(budgeted=first):
                scored = await self._backend.score(jobs)
        except BudgetSpent as exc:
            return [Done(_result(NOT_RUN, None, str(exc), job[1]), cacheable=False)
                    for job in jobs]
        if not scored:  # ran out of time as a whole: which answer it was, each alone
            return [r for one in await asyncio.gather(*(self._chunk([k], entries, first)
                                                        for k in keys)) for r in one]
        results = [self._done(key, s) for key, s in zip(keys, scored, strict=False)]
        if len(scored) < len(keys):
            results += await self._chunk(keys[len(scored):], entries, first=False)
        return results

    def _done(self, key: Key, scored: Scored) -> Done[ReasoningGymResult]:
        """A scored answer for the lane: a timeout remembered for a while (at once where it
        used its limit in CPU time), the sandbox's outage neither kept nor remembered."""
        result = _result(scored.status, scored.score, scored.detail, key[2])
        if scored.status == "timeout":
            metrics.TIMEOUTS.labels(self.name).inc()
            return Done(result, timeout=scored.cpu_s >= CPU_BOUND * self.config.timeout_s)
        return Done(result, cacheable=scored.status != UNAVAILABLE)


_LANE_VERDICTS: LaneVerdicts[ReasoningGymResult] = LaneVerdicts(
    cacheable=lambda r: r.status not in ("timeout", NOT_RUN, UNAVAILABLE),
    remembered=lambda r, age_s: r.model_copy(update={"detail": (
        f"{r.detail} (the same answer, {age_s:.0f} s ago; remembered)")}),
)
