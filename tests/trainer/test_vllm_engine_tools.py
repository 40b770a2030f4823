"""Code-tool rollouts drawn by the vLLM engine (trainer/engine/multiturn.py), on a tiny model
taught one tool-using transcript, against the real server's sandbox: the turns, masks, limits
and counts of the HF path, a turn that stops inside a call going on in the same sequence, each
policy token's engine log-prob the policy's own, and a trainer step with both on."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from reward_server.tool_client import CodeTool
from tests.helpers.tiny_models import ENGINE_CHARS, char_tokenizer, taught
from tests.helpers.tool_rollouts import ANSWER, CALL, OUTPUT, segments
from trainer.config import GRPOConfig
from trainer.engine.client import Sample
from trainer.engine.multiturn import generate_with_tools_on_engine
from trainer.engine.weights import policy_weights
from trainer.logprobs import completion_logps
from trainer.models import tiny_tokenizer
from trainer.multiturn import ToolUse, generate_with_tools, without_outages
from trainer.rewards import FunctionScorer, ScoredBatch
from trainer.rollout import Rollout, Sampling, eos_token_ids, format_prompt
from trainer.seeds import DrawSeeds
from trainer.tools import call_format
from trainer.train import GRPOTrainer

pytestmark = pytest.mark.slow  # an engine process


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    tokenizer = char_tokenizer(chars=ENGINE_CHARS)
    assert len(tokenizer) == len(tiny_tokenizer())  # the engine's model's vocabulary
    return tokenizer


@pytest.fixture(scope="module")
def fenced(tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    return taught(tokenizer, "q=>", [CALL, ANSWER], [OUTPUT], heads=2)


@pytest.fixture(scope="module")
def two_calls(tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    return taught(tokenizer, "q=>", [CALL, CALL, ANSWER], [OUTPUT, OUTPUT], heads=2)


class _Recorded:
    """The engine with each request it was sent and what it drew (the real engine draws)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.requests: list[tuple[list[list[int]], int, list[list[Sample]]]] = []

    def generate(self, prompts: list[list[int]], n: int, **options: Any) -> list[list[Sample]]:
        drawn = self.engine.generate(prompts, n, **options)
        self.requests.append((prompts, n, drawn))
        return drawn


def _setup(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, url: str,
           max_turns: int, **tool: Any) -> tuple[ToolUse, list[dict[str, str]], list[Any]]:
    use = ToolUse(CodeTool(url, **tool), call_format("fenced", tokenizer), max_turns)
    rows = [{"prompt": "q"}]
    return use, rows, [format_prompt(r, tokenizer, "prompt", None, True) for r in rows]


def _on_engine(engine: Any, model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase,
               url: str, max_completion_length: int = 120, G: int = 2, max_turns: int = 2,
               temperature: float = 0.01, greedy: bool = False, **tool: Any) -> Rollout:
    """A rollout drawn by ``engine`` holding ``model``'s weights."""
    with policy_weights(model) as weights:
        getattr(engine, "engine", engine).load_weights(weights)
    use, rows, prompts = _setup(model, tokenizer, url, max_turns, **tool)
    sampling = Sampling(G, 64, max_completion_length, temperature=temperature)
    try:
        return generate_with_tools_on_engine(engine, tokenizer, rows, prompts, sampling, use,
                                             eos_token_ids(model, tokenizer), greedy,
                                             seeds=None if greedy else DrawSeeds(0, 0, 0))
    finally:
        use.tool.close()


def test_a_fenced_call_runs_and_the_rollout_goes_on(vllm_engine: Any, fenced, tokenizer,
                                                    sandbox_url: str) -> None:
    rollout = _on_engine(vllm_engine, fenced, tokenizer, sandbox_url)
    for row in range(2):
        assert segments(rollout, tokenizer, row) == [CALL, OUTPUT, ANSWER]
        assert rollout.texts[row] == CALL + OUTPUT + "42"  # the verifier reads it all
    assert rollout.tool_stats.tolist() == [[1, 0, 0, 0], [1, 0, 0, 0]]
    assert not rollout.truncated.any() and rollout.tool_seconds > 0
    tool = (rollout.completion_mask == 1) & (rollout.tool_mask == 0)
    assert tool.sum() == 2 * len(tokenizer(OUTPUT).input_ids)
    assert (rollout.engine_logps[tool] == 0).all()
    assert (rollout.engine_logps[rollout.completion_mask == 0] == 0).all()


def _follow_on(requests: list[tuple[list[list[int]], int, list[list[Sample]]]],
               call: list[int], output: list[int]) -> None:
    """Each request goes on from the one before: each context is the one before with what it
    drew appended, or, where that completed the call, cut after the call, the tool's output
    appended; G samples of the prompt first, then one request for every open rollout."""
    (prompt,), _, _ = requests[0]
    for (before, drawn_n, drawn), (after, n, _) in zip(requests, requests[1:], strict=False):
        assert n == 1 and len(after) == 2  # both rollouts, one request
        contexts = [context for context in before for _ in range(drawn_n)]
        samples = [sample for group in drawn for sample in group]
        for context, sample, following in zip(contexts, samples, after, strict=True):
            grown = context + sample.token_ids
            if following != grown:
                assert grown[: len(prompt + call)] == prompt + call
                assert following == prompt + call + output


def test_a_call_drawn_within_one_request_is_cut_where_it_completes(
        vllm_engine: Any, fenced, tokenizer, sandbox_url: str) -> None:
    """Each backtick is a token here, none a fence: outside a call nothing but an EOS stops
    the engine, so the call is drawn within the first request and found there, the turn cut
    where it completed; the next request goes on from the cut, with the tool's output."""
    engine = _Recorded(vllm_engine)
    rollout = _on_engine(engine, fenced, tokenizer, sandbox_url)
    call = tokenizer(CALL).input_ids
    _, n, first = engine.requests[0]
    assert n == 2 and all(s.token_ids[: len(call)] == call and len(s.token_ids) >= len(call)
                          for s in first[0])
    _follow_on(engine.requests, call, tokenizer(OUTPUT).input_ids)
    assert len(engine.requests) == 2  # one round per turn
    assert segments(rollout, tokenizer, 0) == [CALL, OUTPUT, ANSWER]


def test_a_turn_stopped_inside_a_call_goes_on_in_the_same_sequence(
        vllm_engine: Any, sandbox_url: str) -> None:
    """With "```" one token (as BPE vocabularies have it), inline backticks in the prose stop
    nothing; the opening fence stops the engine, and inside the call every backtick does,
    the closing fence completing it: each next request is the one before with what it drew
    appended."""
    tokenizer = char_tokenizer(chars=ENGINE_CHARS.replace("z", ""))
    tokenizer.add_tokens(["```"])  # in place of "z": the engine's model's 47 ids
    assert len(tokenizer) == len(tiny_tokenizer())
    ticked = "`x` " + CALL
    model = taught(tokenizer, "q=>", [ticked, ANSWER], [OUTPUT], heads=2)
    engine = _Recorded(vllm_engine)
    rollout = _on_engine(engine, model, tokenizer, sandbox_url)
    _, n, first = engine.requests[0]
    assert n == 2 and [s.token_ids for s in first[0]] == [tokenizer("`x` ```").input_ids] * 2
    _follow_on(engine.requests, tokenizer(ticked).input_ids, tokenizer(OUTPUT).input_ids)
    assert len(engine.requests) == 3  # the opening fence, the closing fence, the answer
    assert segments(rollout, tokenizer, 0) == [ticked, OUTPUT, ANSWER]


def test_policy_tokens_carry_the_policys_logprobs(vllm_engine: Any, fenced, tokenizer,
                                                  sandbox_url: str) -> None:
    """At the sampling temperature, each token the policy wrote has the log-prob a forward of
    the trainer's policy over prompt + completion gives it; a tool's token has 0."""
    rollout = _on_engine(vllm_engine, fenced, tokenizer, sandbox_url, G=4, temperature=0.7)
    ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], 1)
    attn = torch.cat([rollout.prompt_mask, rollout.completion_mask], 1)
    T = rollout.completion_ids.shape[1]
    with torch.no_grad():
        ours = completion_logps(fenced, ids, attn, T, 0.7)
    policy = (rollout.completion_mask * rollout.tool_mask).bool()
    tool = rollout.completion_mask.bool() & ~policy
    assert tool.any() and (rollout.engine_logps[tool] == 0).all()
    torch.testing.assert_close(rollout.engine_logps[policy], ours[policy], atol=1e-4, rtol=0)


def _hf(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, url: str,
        max_completion_length: int, max_turns: int) -> Rollout:
    use, rows, prompts = _setup(model, tokenizer, url, max_turns)
    try:
        return generate_with_tools(model, tokenizer, rows, prompts,
                                   Sampling(1, 64, max_completion_length), use, greedy=True)
    finally:
        use.tool.close()


@pytest.mark.parametrize(("max_turns", "max_completion_length"), [(2, 120), (1, 90), (2, 30)])
def test_greedy_rollouts_are_the_hf_paths(vllm_engine: Any, two_calls, tokenizer,
                                          sandbox_url: str, max_turns: int,
                                          max_completion_length: int) -> None:
    """Greedy, the engine writes what HF generate writes: both calls; one call and the
    second block as text (max_tool_turns); the first call, whose output does not fit."""
    ours = _on_engine(vllm_engine, two_calls, tokenizer, sandbox_url, max_completion_length,
                      max_turns=max_turns, greedy=True)
    theirs = _hf(two_calls, tokenizer, sandbox_url, max_completion_length, max_turns)
    for field in ("completion_ids", "completion_mask", "tool_mask", "tool_stats", "truncated"):
        assert torch.equal(getattr(ours, field), getattr(theirs, field)), field
    turns = segments(ours, tokenizer, 0)
    assert int(ours.completion_mask.sum()) <= max_completion_length
    assert ours.tool_stats[0, 0] == min(max_turns, 2 if max_completion_length > 60 else 1)
    if max_turns == 1:
        assert turns[:2] == [CALL, OUTPUT] and turns[2].startswith(CALL) and len(turns) == 3
    elif max_completion_length == 30:
        assert turns == [CALL] and ours.truncated.all()
    else:
        assert turns == [CALL, OUTPUT, CALL, OUTPUT, ANSWER] and not ours.truncated.any()


def test_an_outage_leaves_the_rollout_unscorable(vllm_engine: Any, fenced, tokenizer) -> None:
    rollout = _on_engine(vllm_engine, fenced, tokenizer, "http://127.0.0.1:9",
                         max_completion_length=300, request_timeout_s=2)
    assert segments(rollout, tokenizer, 0)[0] == CALL
    assert (rollout.tool_mask[rollout.completion_mask.bool()] == 0).any()  # the error text
    assert rollout.tool_stats[:, 1].tolist() == [1, 1]  # failed calls, counted
    assert rollout.tool_stats[:, 3].tolist() == [1, 1]  # outages
    scored = without_outages(ScoredBatch([1.0, 0.0], {"local": [1.0, 0.0]}, [True, False]),
                             rollout)
    assert scored.per_verifier["local"] == [None, None] and not any(scored.correct)


def test_training_steps_with_the_tool_on_the_engine(vllm_engine: Any, fenced, tokenizer,
                                                    sandbox_url: str, tmp_path: Path) -> None:
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path), max_steps=2,
                        prompts_per_step=2, num_generations=2, max_completion_length=80,
                        temperature=0.5, learning_rate=1e-4, progress_bar=False, beta=0.05,
                        code_tool=True, tool_url=sandbox_url, max_tool_turns=1,
                        rollout_engine="vllm", tool_format="fenced")
    scorer = FunctionScorer(lambda texts, rows: [float(t.endswith("42")) for t in texts])
    trainer = GRPOTrainer(copy.deepcopy(fenced), tokenizer, [{"prompt": "q"}] * 4, config,
                          None, eval_rows=[{"prompt": "q"}], scorer=scorer, engine=vllm_engine)
    for step in (1, 2):
        metrics = trainer.training_step()
        assert trainer.step == step
        assert metrics["tools/call_frequency"] > 0 and metrics["time/tools"] > 0
        assert metrics["tools/failure_frequency"] == 0.0
        assert 0 < metrics["tools/output_token_fraction"] < 1
    assert trainer.evaluate()["eval/accuracy"] == 1.0  # greedy, with the tool, on the engine
    trainer.tool_use.tool.close()
