"""Code-tool rollouts drawn by the engine: the turns of ``trainer.multiturn`` (the same
traces, masks, limits and calls), each turn's tokens drawn by a vLLM engine instead of HF
``generate``, with their log-probs under the engine.

The engine has no stop strings (it runs without a tokenizer), so a turn that must end at a
call's closing fence ends as ``CallStop`` finds it under ``generate`` through stop ids, one set
per sample (``StopIds``): outside a call, the EOS ids and the tokens that can open a call by
themselves (their text holds "```"); inside one, or where one may be opening, every token that
holds a backtick, where the trainer asks the turn's text whether its call is complete. Inline
code in prose (`x`) stops nothing. A call opened and completed within one request by tokens
none of which stopped it ("`", "`", "`") is found in what was drawn: the sample is cut where
its call completed, at the first such token (``trainer.multiturn.call_cut``), which is a
stopping time, so what is kept is what a stop there would have drawn. A sample stopped without
a complete call goes on from there in the next request: the same ids with the new ones
appended, never re-tokenized, whose states the engine's prefix cache still holds. Stopping and
going on draws what one request would have drawn: each token comes from π/T given those
before it.

Each round is one engine call over every open rollout: the first draws G samples of each
prompt, each later one a sample per rollout, from wherever it stands (inside a turn, or after
a tool's output); each call takes the next of the step's seeds (trainer/seeds.py), so a
run's rollouts follow from its seed and step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedTokenizerBase

from trainer.engine.client import Sample, VLLMEngine
from trainer.engine.sampling import draw_seed
from trainer.multiturn import (
    ToolTurns,
    ToolUse,
    Trace,
    Turn,
    call_cut,
    closer_ids,
    opener_ids,
    traces_of,
)
from trainer.rollout import Prompt, Rollout, Sampling, encode_prompts
from trainer.seeds import DrawSeeds
from trainer.tools import CallFormat


@dataclass(frozen=True)
class StopIds:
    """The ids a turn's request stops at, by where its turn stands. Each stop costs a round
    (an engine call over every open rollout), so a turn stops only where its call may end:
    at each closer inside a call (or where one may be opening), at the tokens that can open
    one by themselves outside it, and at the EOS ids alone where no call can end it (a turn
    past ``max_tool_turns``; the template format, whose calls end at an EOS)."""

    eos: list[int]
    opening: list[int]  # the EOS ids and the openers
    inside: list[int]  # the EOS ids and every closer

    @classmethod
    def of(cls, tokenizer: PreTrainedTokenizerBase, fmt: CallFormat, eos_ids: list[int],
           closers: list[int]) -> StopIds:
        openers = opener_ids(tokenizer, fmt, closers)
        return cls(sorted(set(eos_ids)), sorted(set(eos_ids) | set(openers)),
                   sorted(set(eos_ids) | set(closers)))

    def for_turn(self, tokenizer: PreTrainedTokenizerBase, fmt: CallFormat, new: list[int],
                 armed: bool) -> list[int]:
        """The stop ids of a request that goes on from a turn's tokens ``new``."""
        if not armed:
            return self.eos
        text = tokenizer.decode(new, skip_special_tokens=True)
        return self.inside if fmt.call_open(text) else self.opening


@dataclass
class _Writing:
    """A trace's turn so far: what the engine drew since the turn began."""

    trace: Trace
    armed: bool  # a call may end the turn
    new: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)


def generate_with_tools_on_engine(engine: VLLMEngine, tokenizer: PreTrainedTokenizerBase,
                                  rows: list[dict[str, Any]], prompts: list[Prompt],
                                  sampling: Sampling, use: ToolUse, eos_ids: list[int],
                                  greedy: bool = False, closers: list[int] | None = None,
                                  seeds: DrawSeeds | None = None) -> Rollout:
    """G = ``sampling.num_generations`` rollouts per prompt (1 when ``greedy``), each calling
    the tool up to ``use.max_turns`` times; ``closers``: the ids that may complete a call
    (``trainer.multiturn.closer_ids``, found here if not given); ``seeds``: one for each
    engine call (none when ``greedy``)."""
    G = 1 if greedy else sampling.num_generations
    ids, mask, cut = encode_prompts(tokenizer, prompts, sampling.max_prompt_length)
    turns = ToolTurns(tokenizer, sampling, use, eos_ids)
    closers = closer_ids(tokenizer, use.format) if closers is None else closers
    stops = StopIds.of(tokenizer, use.format, eos_ids, closers)

    def draw(contexts: list[list[int]], n: int, limits: list[int],
             standing: list[_Writing]) -> list[Sample]:  # each context's turn
        stop_ids = [stops.for_turn(tokenizer, use.format, w.new, w.armed)
                    for w in standing]
        drawn = engine.generate(contexts, n=n, max_tokens=limits, stop_token_ids=stop_ids,
                                temperature=sampling.temperature, top_p=sampling.top_p,
                                top_k=sampling.top_k, greedy=greedy,
                                seed=draw_seed(greedy, seeds))
        return [sample for group in drawn for sample in group]

    traces = traces_of(ids, mask, G)
    writing = [_Writing(t, turns.armed(t)) for t in traces]
    closing = set(closers)
    try:
        samples = draw([t.prompt for t in traces[::G]], G,
                       [sampling.max_completion_length] * (len(traces) // G), writing[::G])
        while writing:
            writing = _next_round(turns, writing, samples, closing)
            if writing:
                samples = draw([w.trace.prompt + w.trace.tokens + w.new for w in writing], 1,
                               [turns.room(w.trace) - len(w.new) for w in writing], writing)
    finally:
        use.tool.close_sessions()
    return turns.rollout(traces, ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0),
                         [row for row in rows for _ in range(G)], cut.repeat_interleave(G),
                         engine_logps=True)


def _next_round(turns: ToolTurns, writing: list[_Writing], samples: list[Sample],
                closers: set[int]) -> list[_Writing]:
    """Each sample onto its turn, cut where a call completed; the turns that ended taken
    (their calls run together); what the next round draws: the turns that go on, and a new
    one for each open trace."""
    ended: dict[int, Turn] = {}
    for k, (turn, sample) in enumerate(zip(writing, samples, strict=True)):
        start = len(turn.new)
        turn.new += sample.token_ids
        turn.logps += sample.logprobs
        stopped_at = (call_cut(turns.tokenizer, turns.use.format, turn.new, closers, start)
                      if turn.armed else None)
        last = sample.token_ids[-1] if sample.token_ids else None
        # it stopped at a closer and its call is not complete yet (or it may make none);
        # anything else (an EOS, its room, the engine's own limit) ends the turn
        goes_on = (sample.finish_reason == "stop" and stopped_at is None and last in closers
                   and last not in turns.eos and len(turn.new) < turns.room(turn.trace))
        if not goes_on:
            end = len(turn.new) if stopped_at is None else stopped_at
            ended[k] = Turn(turn.trace, turn.new[:end], stopped_at, turn.armed,
                            turn.logps[:end])
    turns.end_turns(list(ended.values()))
    return [_Writing(w.trace, turns.armed(w.trace)) if k in ended else w
            for k, w in enumerate(writing) if not w.trace.done]
