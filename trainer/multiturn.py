"""Rollouts that call a code tool while they are written: generate a turn, run the turn's
calls in the sandbox (all rollouts' at once), append their output, generate again, up to
``max_tool_turns`` calls per rollout.

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
class _Trace:
    """One rollout being written."""

    prompt: list[int]
    key: int  # the rollout's place in its batch: its tool session's key
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)  # 1: the policy's token, 0: a tool's
    calls: int = 0
    failures: int = 0  # calls the tool could not answer
    outages: int = 0  # of those, the ones the policy did not cause (trainer/tools.ToolResult)
    program_errors: int = 0  # calls whose program failed
    ended: bool = False  # its last turn ended with an EOS
    done: bool = False

    def add(self, ids: list[int], policy: bool) -> None:
        self.tokens += ids
        self.mask += [int(policy)] * len(ids)


class CallStop(StoppingCriteria):
    """Ends a row's turn once its new text holds a complete call (the fenced format), and
    remembers after how many new tokens, so the turn is cut at a token boundary."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, fmt: CallFormat, start: int,
                 armed: list[bool]) -> None:
        self.tokenizer, self.fmt, self.start, self.armed = tokenizer, fmt, start, armed
        self.at: list[int | None] = [None] * len(armed)
        self._may_close: dict[int, bool] = {}  # token id -> holds a backtick

    def _closes(self, token: int) -> bool:
        if token not in self._may_close:
            self._may_close[token] = "`" in self.tokenizer.decode([token])
        return self._may_close[token]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 **kwargs: Any) -> torch.BoolTensor:
        new = input_ids.shape[1] - self.start
        for i, row in enumerate(input_ids):
            if self.at[i] is None and self.armed[i] and self._closes(int(row[-1])):
                text = self.tokenizer.decode(row[self.start:], skip_special_tokens=True)
                if self.fmt.call_end(text) is not None:
                    self.at[i] = new
        return torch.tensor([a is not None for a in self.at], device=input_ids.device)


def _left_padded(contexts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(c) for c in contexts)
    ids = torch.tensor([[pad_id] * (width - len(c)) + c for c in contexts])
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in contexts])
    return ids, mask


class _Turns:
    """The turn-by-turn loop over one generate() call's rollouts."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 sampling: Sampling, use: ToolUse, greedy: bool) -> None:
        self.model, self.tokenizer, self.sampling, self.use = model, tokenizer, sampling, use
        self.greedy = greedy
        self.eos = set(eos_token_ids(model, tokenizer))
        self.eos_list = sorted(self.eos)
        self.device = next(model.parameters()).device
        self.seconds = 0.0

    def generate(self, traces: list[_Trace], ids: torch.Tensor, mask: torch.Tensor,
                 G: int, share: bool) -> None:
        """One turn of every open trace: ``ids`` (rows, P) are their contexts, G samples each
        (G > 1 only for the first turn, where a group still shares its prompt)."""
        budget = max(self.sampling.max_completion_length - len(t.tokens) for t in traces)
        sampling = dataclasses.replace(self.sampling, max_completion_length=budget)
        config = generation_config(sampling, self.eos_list, self.tokenizer.pad_token_id,
                                   greedy=self.greedy)
        armed = [t.calls < self.use.max_turns for t in traces]
        stop = CallStop(self.tokenizer, self.use.format, ids.shape[1], armed)
        out = _generate(self.model, ids.to(self.device), mask.to(self.device), config, G, share,
                        stopping_criteria=StoppingCriteriaList([stop]))
        calls: list[tuple[int, ToolCall]] = []
        for i, (trace, row) in enumerate(zip(traces, out.tolist(), strict=True)):
            call = self._take_turn(trace, row, stop.at[i], armed[i])
            if call is not None:
                calls.append((i, call))
        self._run(traces, calls)

    def _take_turn(self, trace: _Trace, new: list[int], stopped_at: int | None,
                   armed: bool) -> ToolCall | None:
        """Append a turn's tokens to its trace; the call it ends with, if one is to run."""
        room = self.sampling.max_completion_length - len(trace.tokens)
        end_eos = next((j + 1 for j, t in enumerate(new) if t in self.eos), None)
        ends = [e for e in (end_eos, stopped_at) if e is not None]
        end = min([*ends, len(new), room])
        trace.add(new[:end], policy=True)
        trace.ended = end_eos is not None and end == end_eos
        by_call = stopped_at is not None and end == stopped_at
        if not armed or len(trace.tokens) >= self.sampling.max_completion_length or not (
                trace.ended or by_call):
            trace.done = True
            return None
        text = self.tokenizer.decode(new[:end], skip_special_tokens=False)
        call = self.use.format.parse(text)
        if call is None:
            trace.done = True
        return call

    def _run(self, traces: list[_Trace], calls: list[tuple[int, ToolCall]]) -> None:
        """The turn's calls in one round; each output appended, or the rollout ended where it
        is when the output would not fit."""
        if not calls:
            return
        # keyed by the rollout, not by its place among this turn's open ones, which shifts
        # as others end: a session belongs to one rollout
        done = self.use.tool.run([(traces[i].key, call) for i, call in calls])
        self.seconds += done.seconds
        for (i, _), result in zip(calls, done.results, strict=True):
            trace = traces[i]
            trace.calls += 1
            trace.failures += int(result.failed)
            trace.outages += int(result.outage)
            trace.program_errors += int(result.program_error)
            ids = self.use.format.output_ids(self.tokenizer, result.text)
            if len(trace.tokens) + len(ids) >= self.sampling.max_completion_length:
                trace.done = True
                continue
            trace.add(ids, policy=False)

    def contexts(self, traces: list[_Trace]) -> tuple[torch.Tensor, torch.Tensor]:
        return _left_padded([t.prompt + t.tokens for t in traces], self.tokenizer.pad_token_id)


@torch.no_grad()
def generate_with_tools(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                        rows: list[dict[str, Any]], prompts: list[Prompt], sampling: Sampling,
                        use: ToolUse, greedy: bool = False) -> Rollout:
    """G = ``sampling.num_generations`` rollouts per prompt (1 when ``greedy``), each calling
    the tool up to ``use.max_turns`` times."""
    G = 1 if greedy else sampling.num_generations
    ids, mask, cut = encode_prompts(tokenizer, prompts, sampling.max_prompt_length)
    loop = _Turns(model, tokenizer, sampling, use, greedy)
    traces = [_Trace(prompt=row[m.bool()].tolist(), key=k * G + g)
              for k, (row, m) in enumerate(zip(ids, mask, strict=True)) for g in range(G)]
    try:
        loop.generate(traces, ids, mask, G, sampling.share_prompts)
        while open_ := [t for t in traces if not t.done]:
            loop.generate(open_, *loop.contexts(open_), 1, False)
    finally:
        use.tool.close_sessions()
    return _rollout(tokenizer, traces, ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0),
                    [row for row in rows for _ in range(G)], cut.repeat_interleave(G),
                    loop.seconds)


def without_outages(scored: ScoredBatch, rollout: Rollout) -> ScoredBatch:
    """Rollouts that a tool outage shaped (a call the sandbox could not answer for a reason the
    policy did not cause) are unscorable: what followed the error text is not the policy's
    answer to the task, so neither a 0 nor a 1 may train on it."""
    if rollout.tool_stats is None:
        return scored
    hit = (rollout.tool_stats[:, 3] > 0).tolist()
    return scored.nulled(hit) if any(hit) else scored


def _rollout(tokenizer: PreTrainedTokenizerBase, traces: list[_Trace], prompt_ids: torch.Tensor,
             prompt_mask: torch.Tensor, rows: list[dict[str, Any]], cut: torch.Tensor,
             seconds: float) -> Rollout:
    T = max(max(len(t.tokens) for t in traces), 1)
    pad = tokenizer.pad_token_id
    completion_ids = torch.tensor([t.tokens + [pad] * (T - len(t.tokens)) for t in traces])
    completion_mask = torch.tensor([[1] * len(t.tokens) + [0] * (T - len(t.tokens))
                                    for t in traces])
    tool_mask = torch.tensor([t.mask + [0] * (T - len(t.mask)) for t in traces])
    stats = torch.tensor([[t.calls, t.failures, t.program_errors, t.outages] for t in traces])
    # the verifier reads the whole transcript, tool output included, as SimpleTIR scores it
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    return Rollout(prompt_ids, prompt_mask, completion_ids, completion_mask,
                   torch.tensor([not t.ended for t in traces]), texts, rows, cut,
                   tool_mask=tool_mask, tool_stats=stats, tool_seconds=seconds)
