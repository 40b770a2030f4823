"""Code-tool rollouts drawn by the engine: the turns of ``trainer.multiturn`` (the same
traces, masks, limits and calls), each turn's tokens drawn by a vLLM engine instead of HF
``generate``, with their log-probs under the engine.

The engine has no stop strings (it runs without a tokenizer), so a turn that must end at a
call's closing fence ends as ``CallStop`` finds it under ``generate``: the engine stops a sample
at any token that holds the format's closer (a backtick), and the trainer asks the turn's text
whether its call is complete. When it is not, the sample goes on from there in the next
request: the same ids with the new ones appended, never re-tokenized, whose states the engine's
prefix cache still holds. Stopping and going on draws what one request would have drawn: each
token comes from π/T given those before it.

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
    closer_ids,
    completes_call,
    traces_of,
)
from trainer.rollout import Prompt, Rollout, Sampling, encode_prompts
from trainer.seeds import DrawSeeds


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
    stops = sorted(set(eos_ids) | set(closers))

    def draw(contexts: list[list[int]], n: int, limits: list[int]) -> list[Sample]:
        drawn = engine.generate(contexts, n=n, max_tokens=limits, stop_token_ids=stops,
                                temperature=sampling.temperature, top_p=sampling.top_p,
                                top_k=sampling.top_k, greedy=greedy,
                                seed=draw_seed(greedy, seeds))
        return [sample for group in drawn for sample in group]

    traces = traces_of(ids, mask, G)
    writing = [_Writing(t, turns.armed(t)) for t in traces]
    closing = set(closers)
    try:
        samples = draw([t.prompt for t in traces[::G]], G,
                       [sampling.max_completion_length] * (len(traces) // G))
        while writing:
            writing = _next_round(turns, writing, samples, closing)
            if writing:
                samples = draw([w.trace.prompt + w.trace.tokens + w.new for w in writing], 1,
                               [turns.room(w.trace) - len(w.new) for w in writing])
    finally:
        use.tool.close_sessions()
    return turns.rollout(traces, ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0),
                         [row for row in rows for _ in range(G)], cut.repeat_interleave(G),
                         engine_logps=True)


def _next_round(turns: ToolTurns, writing: list[_Writing], samples: list[Sample],
                closers: set[int]) -> list[_Writing]:
    """Each sample onto its turn; the turns that ended taken (their calls run together);
    what the next round draws: the turns that go on, and a new one for each open trace."""
    ended: dict[int, Turn] = {}
    for k, (turn, sample) in enumerate(zip(writing, samples, strict=True)):
        turn.new += sample.token_ids
        turn.logps += sample.logprobs
        stopped_at = _call_end(turns, turn, closers)
        last = sample.token_ids[-1] if sample.token_ids else None
        # it stopped at a closer and its call is not complete yet (or it may make none);
        # anything else (an EOS, its room, the engine's own limit) ends the turn
        goes_on = (sample.finish_reason == "stop" and stopped_at is None and last in closers
                   and last not in turns.eos and len(turn.new) < turns.room(turn.trace))
        if not goes_on:
            ended[k] = Turn(turn.trace, turn.new, stopped_at, turn.armed, turn.logps)
    turns.end_turns(list(ended.values()))
    return [_Writing(w.trace, turns.armed(w.trace)) if k in ended else w
            for k, w in enumerate(writing) if not w.trace.done]


def _call_end(turns: ToolTurns, turn: _Writing, closers: set[int]) -> int | None:
    """The turn's length if it ends with a complete call (what ``CallStop`` records)."""
    if (turn.armed and turn.new and turn.new[-1] in closers
            and completes_call(turns.tokenizer, turns.use.format, turn.new)):
        return len(turn.new)
    return None
