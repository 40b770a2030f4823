"""Rollouts that call a code tool while they are written: generate a turn, run the turn's
calls in the sandbox (all rollouts' at once), append their output, generate again, up to
``max_tool_turns`` calls per rollout. ``ToolTurns`` does what a turn does to its rollout,
whoever drew its tokens; the drivers only draw them: HF ``generate`` here, a vLLM engine in
``trainer.engine.multiturn``.

The completion is one token sequence, the policy's turns and the tools' turns in order, built
by concatenating ids (never re-tokenized, as TRL's ``_tool_call_loop`` does), so the update's
single forward over prompt + completion sees exactly the tokens sampling saw. ``tool_mask``
(TRL's name; 1: the policy wrote it, 0: a tool's output) keeps the tool's tokens out of the
loss and the KL: the policy did not choose them. Everything counts against
``max_completion_length``, tool output included, so a rollout stays bounded; a tool turn that
would not fit ends the rollout where it is (TRL's rule).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
)

from reward_server.tool_client import CodeTool, ToolCall
from trainer.rewards import ScoredBatch
from trainer.rollout import (
    Prompt,
    Rollout,
    Sampling,
    _generate,
    encode_prompts,
    eos_token_ids,
    generation_config,
)
from trainer.tools import CallFormat


@dataclass(frozen=True)
class ToolUse:
    """The tool of a run: its client, the call format, and the calls a rollout may make."""

    tool: CodeTool
    format: CallFormat
    max_turns: int


@dataclass
class Trace:
    """One rollout being written."""

    prompt: list[int]
    key: int  # the rollout's place in its batch: its tool session's key
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # 1: the policy's token, 0: a tool's
    logps: list[float] = field(default_factory=list)  # an engine's, per token; 0 at a tool's
    calls: int = 0
    failures: int = 0  # calls the tool could not answer
    outages: int = 0  # of those, the ones the policy did not cause (trainer/tools.ToolResult)
    program_errors: int = 0  # calls whose program failed
    ended: bool = False  # its last turn ended with an EOS
    done: bool = False

    def add(self, ids: list[int], policy: bool, logps: list[float] | None = None) -> None:
        self.tokens += ids
        self.mask += [int(policy)] * len(ids)
        self.logps += logps[: len(ids)] if logps is not None else [0.0] * len(ids)


@dataclass(frozen=True)
class Turn:
    """A policy turn as a driver drew it: its new tokens (anything past where it ends is
    cut), after how many a call was complete (None: no call ended it), whether a call may
    end it at all, and each token's log-prob where the driver has them."""

    trace: Trace
    new: list[int]
    stopped_at: int | None
    armed: bool
    logps: list[float] | None = None


class ToolTurns:
    """What a turn does, whoever drew it (HF ``generate`` below, the vLLM engine in
    ``trainer.engine.multiturn``): its tokens onto the trace, up to where it ends and within
    ``max_completion_length``; the round's calls run together; their outputs appended."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, sampling: Sampling, use: ToolUse,
                 eos_ids: list[int]) -> None:
        self.tokenizer, self.sampling, self.use = tokenizer, sampling, use
        self.eos = set(eos_ids)
        self.seconds = 0.0

    def room(self, trace: Trace) -> int:
        return self.sampling.max_completion_length - len(trace.tokens)

    def armed(self, trace: Trace) -> bool:
        """Whether a call may end the trace's next turn (past max_turns, a call is text)."""
        return trace.calls < self.use.max_turns

    def end_turns(self, turns: list[Turn]) -> None:
        """Each turn onto its trace, then the calls they end with, in one round."""
        calls = [(turn.trace, call) for turn in turns
                 if (call := self._take_turn(turn)) is not None]
        self._run(calls)

    def _take_turn(self, turn: Turn) -> ToolCall | None:
        """Append a turn's tokens to its trace; the call it ends with, if one is to run."""
        trace, new, stopped_at = turn.trace, turn.new, turn.stopped_at
        room = self.room(trace)
        end_eos = next((j + 1 for j, t in enumerate(new) if t in self.eos), None)
        ends = [e for e in (end_eos, stopped_at) if e is not None]
        end = min([*ends, len(new), room])
        trace.add(new[:end], policy=True, logps=turn.logps)
        trace.ended = end_eos is not None and end == end_eos
        by_call = stopped_at is not None and end == stopped_at
        if not turn.armed or len(trace.tokens) >= self.sampling.max_completion_length or not (
                trace.ended or by_call):
            trace.done = True
            return None
        text = self.tokenizer.decode(new[:end], skip_special_tokens=False)
        call = self.use.format.parse(text)
        if call is None:
            trace.done = True
        return call

    def _run(self, calls: list[tuple[Trace, ToolCall]]) -> None:
        """The turn's calls in one round; each output appended, or the rollout ended where it
        is when the output would not fit."""
        if not calls:
            return
        done = self.use.tool.run([(trace.key, call) for trace, call in calls])
        self.seconds += done.seconds
        for (trace, _), result in zip(calls, done.results, strict=True):
            trace.calls += 1
            trace.failures += int(result.failed)
            trace.outages += int(result.outage)
            trace.program_errors += int(result.program_error)
            ids = self.use.format.output_ids(self.tokenizer, result.text)
            if len(trace.tokens) + len(ids) >= self.sampling.max_completion_length:
                trace.done = True
                continue
            trace.add(ids, policy=False)

    def rollout(self, traces: list[Trace], prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                rows: list[dict[str, Any]], cut: torch.Tensor, engine_logps: bool = False
                ) -> Rollout:
        """The traces as one Rollout (``engine_logps``: with the log-probs they carry)."""
        T = max(max(len(t.tokens) for t in traces), 1)
        pad = self.tokenizer.pad_token_id

        def padded(values: list[list[Any]], fill: Any) -> torch.Tensor:
            return torch.tensor([v + [fill] * (T - len(v)) for v in values])

        completion_ids = padded([t.tokens for t in traces], pad)
        stats = torch.tensor([[t.calls, t.failures, t.program_errors, t.outages]
                              for t in traces])
        # the verifier reads the whole transcript, tool output included, as SimpleTIR scores it
        texts = self.tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
        return Rollout(prompt_ids, prompt_mask, completion_ids,
                       padded([[1] * len(t.tokens) for t in traces], 0),
                       torch.tensor([not t.ended for t in traces]), texts, rows, cut,
                       tool_mask=padded([t.mask for t in traces], 0), tool_stats=stats,
                       tool_seconds=self.seconds,
                       engine_logps=padded([t.logps for t in traces], 0.0) if engine_logps
                       else None)


def traces_of(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, G: int) -> list[Trace]:
    """G traces per prompt row (its ids without padding), groups contiguous."""
    prompts = [row[m.bool()].tolist() for row, m in zip(prompt_ids, prompt_mask, strict=True)]
    return [Trace(prompt=p, key=k * G + g)
            for k, p in enumerate(prompts) for g in range(G)]


# --- the HF generate driver ---------------------------------------------------------------


class CallStop(StoppingCriteria):
    """Ends a row's turn once its new text holds a complete call (the fenced format), and
    remembers after how many new tokens, so the turn is cut at a token boundary."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, fmt: CallFormat, start: int,
                 armed: list[bool]) -> None:
        self.tokenizer, self.fmt, self.start, self.armed = tokenizer, fmt, start, armed
        self.at: list[int | None] = [None] * len(armed)
        self._may_close: dict[int, bool] = {}  # token id -> holds the format's closer

    def _closes(self, token: int) -> bool:
        if token not in self._may_close:
            self._may_close[token] = closes(self.tokenizer, self.fmt, token)
        return self._may_close[token]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 **kwargs: Any) -> torch.BoolTensor:
        new = input_ids.shape[1] - self.start
        for i, row in enumerate(input_ids):
            if (self.at[i] is None and self.armed[i] and self._closes(int(row[-1]))
                    and completes_call(self.tokenizer, self.fmt, row[self.start:].tolist())):
                self.at[i] = new
        return torch.tensor([a is not None for a in self.at], device=input_ids.device)


def closes(tokenizer: PreTrainedTokenizerBase, fmt: CallFormat, token: int) -> bool:
    """Whether ``token`` may complete a call: its text holds the format's closer."""
    return fmt.closer is not None and fmt.closer in tokenizer.decode([token])


def completes_call(tokenizer: PreTrainedTokenizerBase, fmt: CallFormat, new: list[int]
                   ) -> bool:
    """Whether a turn's tokens so far hold a complete call, where the turn must stop."""
    return fmt.call_end(tokenizer.decode(new, skip_special_tokens=True)) is not None


def closer_ids(tokenizer: PreTrainedTokenizerBase, fmt: CallFormat) -> list[int]:
    """Every id that ``closes``, for an engine that stops at ids, not at text."""
    if fmt.closer is None:
        return []
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    return [i for i, text in enumerate(texts) if fmt.closer in text]


def opener_ids(tokenizer: PreTrainedTokenizerBase, fmt: CallFormat, closers: list[int]
               ) -> list[int]:
    """Of ``closers``, the ids whose text holds the format's opener: those that can open a
    call by themselves (every opener holds the closer)."""
    if fmt.opener is None:
        return []
    texts = tokenizer.batch_decode([[i] for i in closers])
    return [i for i, text in zip(closers, texts, strict=True) if fmt.opener in text]


def call_cut(tokenizer: PreTrainedTokenizerBase, fmt: CallFormat, new: list[int],
             closers: set[int], start: int = 0) -> int | None:
    """Where ``CallStop`` would have ended a turn that drew ``new``: the first length past
    ``start`` (the shorter ones were asked before) that ends at a closer and completes a
    call. Cutting a turn there is stopping it at a stopping time (it depends on the tokens
    up to it alone), so what is kept is drawn as if generation had stopped there."""
    for k in range(start + 1, len(new) + 1):
        if new[k - 1] in closers and completes_call(tokenizer, fmt, new[:k]):
            return k
    return None


def _left_padded(contexts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(c) for c in contexts)
    ids = torch.tensor([[pad_id] * (width - len(c)) + c for c in contexts])
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
    return ids, mask


def _hf_turn(model: PreTrainedModel, turns: ToolTurns, traces: list[Trace], ids: torch.Tensor,
             mask: torch.Tensor, G: int, share: bool, greedy: bool) -> None:
    """One turn of every open trace: ``ids`` (rows, P) are their contexts, G samples each
    (G > 1 only for the first turn, where a group still shares its prompt)."""
    tokenizer = turns.tokenizer
    budget = max(turns.room(t) for t in traces)
    sampling = dataclasses.replace(turns.sampling, max_completion_length=budget)
    config = generation_config(sampling, sorted(turns.eos), tokenizer.pad_token_id,
                               greedy=greedy)
    armed = [turns.armed(t) for t in traces]
    stop = CallStop(tokenizer, turns.use.format, ids.shape[1], armed)
    device = next(model.parameters()).device
    out = _generate(model, ids.to(device), mask.to(device), config, G, share,
                    stopping_criteria=StoppingCriteriaList([stop]))
    turns.end_turns([Turn(trace, row, stop.at[i], armed[i])
                     for i, (trace, row) in enumerate(zip(traces, out.tolist(), strict=True))])


@torch.no_grad()
def generate_with_tools(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                        rows: list[dict[str, Any]], prompts: list[Prompt], sampling: Sampling,
                        use: ToolUse, greedy: bool = False) -> Rollout:
    """G = ``sampling.num_generations`` rollouts per prompt (1 when ``greedy``), each calling
    the tool up to ``use.max_turns`` times."""
    G = 1 if greedy else sampling.num_generations
    ids, mask, cut = encode_prompts(tokenizer, prompts, sampling.max_prompt_length)
    turns = ToolTurns(tokenizer, sampling, use, eos_token_ids(model, tokenizer))
    traces = traces_of(ids, mask, G)
    try:
        _hf_turn(model, turns, traces, ids, mask, G, sampling.share_prompts, greedy)
        while open_ := [t for t in traces if not t.done]:
            contexts = _left_padded([t.prompt + t.tokens for t in open_],
                                    tokenizer.pad_token_id)
            _hf_turn(model, turns, open_, *contexts, 1, False, greedy)
    finally:
        use.tool.close_sessions()
    return turns.rollout(traces, ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0),
                         [row for row in rows for _ in range(G)], cut.repeat_interleave(G))


def without_outages(scored: ScoredBatch, rollout: Rollout) -> ScoredBatch:
    """Rollouts that a tool outage shaped (a call the sandbox could not answer for a reason the
    policy did not cause) are unscorable: what followed the error text is not the policy's
    answer to the task, so neither a 0 nor a 1 may train on it."""
    if rollout.tool_stats is None:
        return scored
    hit = (rollout.tool_stats[:, 3] > 0).tolist()
    return scored.nulled(hit) if any(hit) else scored
