"""Rollouts drawn by a vLLM engine in its own process (trainer/engine/), on the tiny model:
the engine samples what HF ``generate`` would be asked for, shaped as its rollouts are, and
holds the policy's weights after every optimizer step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.conftest import seven_rows
from trainer.config import GRPOConfig, RewardSpec
from trainer.engine.sampling import generate_on_engine
from trainer.engine.weights import policy_weights
from trainer.models import tiny_model, tiny_tokenizer
from trainer.rewards import FunctionScorer
from trainer.rollout import Prompt, Sampling
from trainer.seeds import DrawSeeds
from trainer.train import GRPOTrainer, seed_everything

pytestmark = pytest.mark.slow  # an engine process

_PROBE = [2, 5, 6, 7, 8, 9, 10, 11, 12, 13]  # a sequence whose log-probs both sides compute


def _one_seven(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
    return [float(text.count("7") == 1) for text in texts]


def _trainer(tmp_path: Path, engine: Any, **overrides: Any) -> GRPOTrainer:
    options: dict[str, Any] = dict(
        model="tiny", dataset="unused", output_dir=str(tmp_path / "run"), max_steps=20,
        prompts_per_step=4, num_generations=8, generation_chunk=2, max_completion_length=6,
        learning_rate=3e-3, micro_batch_size=32, progress_bar=False,
        rewards=[RewardSpec(verifier="local")], rollout_engine="vllm")
    options.update(overrides)
    config = GRPOConfig(**options)
    seed_everything(config.seed)
    tokenizer = tiny_tokenizer()
    return GRPOTrainer(tiny_model(tokenizer, config.seed, heads=2), tokenizer, seven_rows(),
                       config, None, scorer=FunctionScorer(_one_seven), engine=engine)


def _engine_on_tiny(engine: Any, seed: int) -> Any:
    """The shared engine loaded with a fresh tiny model of ``seed``; its tokenizer."""
    tokenizer = tiny_tokenizer()
    with policy_weights(tiny_model(tokenizer, seed=seed, heads=2)) as weights:
        engine.load_weights(weights)
    return tokenizer


@torch.no_grad()
def _policy_logprobs(policy: torch.nn.Module) -> torch.Tensor:
    ids = torch.tensor([_PROBE])
    logps = torch.log_softmax(policy(ids).logits[0, :-1].float(), -1)
    return logps.gather(1, ids[0, 1:, None])[:, 0]


@pytest.mark.parametrize("lora_r", [0, 4])
def test_the_engine_holds_the_policys_weights_after_every_update(
        tmp_path: Path, vllm_engine: Any, lora_r: int) -> None:
    """After each optimizer step the engine's log-probs are the policy's (full weights, or
    a LoRA adapter merged in), and the completions it drew were the policy's own."""
    trainer = _trainer(tmp_path, vllm_engine, lora_r=lora_r, lora_alpha=8,
                       learning_rate=3e-2, max_steps=3)
    before = _policy_logprobs(trainer.policy)
    for _ in range(3):
        metrics = trainer.training_step()
        # drawn from the policy itself
        assert metrics["sampling/sampling_logp_difference/mean"] < 1e-4, metrics
        engine = torch.tensor(vllm_engine.prompt_logprobs(_PROBE))
        assert torch.allclose(engine, _policy_logprobs(trainer.policy), atol=1e-4)
    assert (_policy_logprobs(trainer.policy) - before).abs().max() > 1e-2  # it did learn


def test_a_resumed_run_samples_from_its_checkpoints_weights(tmp_path: Path,
                                                            vllm_engine: Any) -> None:
    trainer = _trainer(tmp_path, vllm_engine, learning_rate=3e-2, max_steps=2)
    trainer.train()
    trained = _policy_logprobs(trainer.policy)
    resumed = _trainer(tmp_path, vllm_engine, learning_rate=3e-2, max_steps=2)
    resumed.resume(tmp_path / "run" / "checkpoint-000002")
    engine = torch.tensor(vllm_engine.prompt_logprobs(_PROBE))
    assert torch.allclose(engine, trained, atol=1e-4)


def test_the_engine_draws_g_samples_per_prompt_stopped_as_hf_would(vllm_engine: Any) -> None:
    """G samples of each prompt, groups in prompt order; a completion stops at any EOS id,
    kept and masked in, and one that reaches the length limit without one is truncated."""
    tokenizer = _engine_on_tiny(vllm_engine, seed=3)
    rows = [{"prompt": "say 7: abc"}, {"prompt": "say 7: defgh"}]
    prompts = [Prompt(row["prompt"], False) for row in rows]
    sampling = Sampling(num_generations=8, max_prompt_length=64, max_completion_length=12)
    stops = [tokenizer.convert_tokens_to_ids(c) for c in "789"]  # within 12 about half the time
    rollout = generate_on_engine(vllm_engine, tokenizer, rows, prompts, sampling, stops,
                                 seeds=DrawSeeds(0, 0, 0))
    assert rollout.completion_ids.shape[0] == 16
    assert rollout.rows == [rows[0]] * 8 + [rows[1]] * 8
    lengths = rollout.completion_mask.sum(1)
    for k in range(16):
        n = int(lengths[k])
        tokens = rollout.completion_ids[k, :n].tolist()
        stopped = tokens[-1] in stops
        assert not any(t in stops for t in tokens[:-1])  # stopped at the first
        assert bool(rollout.truncated[k]) == (not stopped)
        assert n == 12 or stopped
        assert rollout.texts[k] == tokenizer.decode(tokens, skip_special_tokens=True)
        assert rollout.engine_logps is not None
        assert (rollout.engine_logps[k, :n] < 0).all() and (rollout.engine_logps[k, n:] == 0).all()
    assert rollout.truncated.any() and not rollout.truncated.all()


def test_a_prompt_shorter_than_vllms_cpu_block_is_prefilled_once(vllm_engine: Any) -> None:
    """The G samples of a prompt, and the next step's draws from it, reuse its cached
    prefix: vLLM caches only whole KV blocks, and its CPU default (128 tokens) is longer than
    most GRPO prompts, so the engine asks for smaller ones."""
    tokenizer = _engine_on_tiny(vllm_engine, seed=5)
    prompts = [tokenizer(f"say 7: {k} " + "hgfedcba" * 10).input_ids for k in range(2)]
    assert all(70 < len(p) < 128 for p in prompts)
    draw = [vllm_engine.generate(prompts, n=4, max_tokens=2, stop_token_ids=[]) for _ in "ab"]
    assert all(s.cached_prompt_tokens >= 64 for samples in draw[1] for s in samples)


def test_reward_rises_with_the_engine_drawing(tmp_path: Path, vllm_engine: Any) -> None:
    """The task the tiny model learns in a few steps (one 7 among its six characters, about
    0.11 by chance): 0.12 at the first step, then 0.16 to 0.47, 0.31 over the last five; at
    an earlier commit, whose draws differed, 0.28 over the last five.
    The engine's draws follow from the run's seed, not from the tests that used it before."""
    trainer = _trainer(tmp_path, vllm_engine, learning_rate=1e-2)
    rewards = [h["reward"] for h in trainer.train()]
    last = sum(rewards[-5:]) / 5
    assert rewards[0] < 0.25 and last > 0.22, " ".join(f"{r:.2f}" for r in rewards)


def test_a_whole_steps_batch_is_drawn_and_follows_from_the_seed(vllm_engine: Any) -> None:
    """More prompt tokens than the engine computes in one pass (vLLM's CPU budget is 4,096:
    some prompts are prefilled in parts) are drawn in one call, and the same trainer seed
    draws the same samples again, another seed others."""
    tokenizer = _engine_on_tiny(vllm_engine, seed=4)
    rows = [{"prompt": f"say 7: {k} " + "abcdefgh" * 12} for k in range(8)]
    prompts = [Prompt(row["prompt"], False) for row in rows]
    sampling = Sampling(num_generations=8, max_prompt_length=128, max_completion_length=8)
    eos = [tokenizer.eos_token_id]

    def draw(seed: int) -> list[list[int]]:
        rollout = generate_on_engine(vllm_engine, tokenizer, rows, prompts, sampling, eos,
                                     seeds=DrawSeeds(seed, 0, 0))
        assert int(rollout.prompt_mask.sum()) > 4096
        return rollout.completion_ids.tolist()

    first = draw(11)
    assert len(first) == 64
    assert draw(11) == first
    assert draw(12) != first


def test_a_draw_takes_nothing_from_the_trainers_random_stream(vllm_engine: Any) -> None:
    """An evaluation's greedy draw leaves the trainer's generator as it was, as HF's greedy
    ``generate`` does, and a sampled draw takes its seed from the step's seeds, not from
    it (trainer/seeds.py): neither moves what the update or another draw gets from it."""
    tokenizer = _engine_on_tiny(vllm_engine, seed=4)
    rows = [{"prompt": "say 7"}, {"prompt": "say 8"}]
    prompts = [Prompt(row["prompt"], False) for row in rows]
    sampling = Sampling(num_generations=4, max_prompt_length=32, max_completion_length=4)
    eos = [tokenizer.eos_token_id]
    state = torch.get_rng_state()
    generate_on_engine(vllm_engine, tokenizer, rows, prompts, sampling, eos, greedy=True)
    assert torch.equal(torch.get_rng_state(), state)
    generate_on_engine(vllm_engine, tokenizer, rows, prompts, sampling, eos,
                       seeds=DrawSeeds(0, 0, 0))
    assert torch.equal(torch.get_rng_state(), state)


def test_an_engine_that_dies_stops_the_run_with_a_checkpoint(tmp_path: Path,
                                                             vllm_engine: Any) -> None:
    """The engine process is killed while step 1's rollouts are scored: the update of step 1
    is made, handing the engine its weights fails, and the run stops there with a checkpoint
    of step 2, rather than drawing step 2 from the old weights. (``vllm_engine``: only to
    skip where vLLM is not installed; this run starts an engine of its own.)"""
    from trainer.engine.client import EngineError

    trainer = _trainer(tmp_path, None, max_steps=4, vllm_kv_cache_gb=1)
    assert trainer.engine is not None
    process = trainer.engine.engine._process
    calls: list[int] = []

    def reward(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
        calls.append(len(texts))
        if len(calls) == 3:  # step 1's first chunk
            process.kill()
            process.wait()
        return _one_seven(texts, rows)

    trainer.scorer.fn = reward  # type: ignore[attr-defined]
    with pytest.raises(EngineError, match="exited"):
        trainer.train()
    assert trainer.step == 2
    assert (tmp_path / "run" / "checkpoint-000002" / "model.safetensors").exists()


def test_a_module_planted_in_the_working_directory_does_not_run_in_the_engine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vllm_engine: Any) -> None:
    """Whoever can write to the directory the trainer runs in cannot put a ``vllm`` of their
    own in front of the engine's. (``vllm_engine``: only to skip without vLLM.)"""
    from trainer.engine.client import EngineSettings, VLLMEngine

    marker = tmp_path / "planted-module-ran"
    (tmp_path / "vllm.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.chdir(tmp_path)
    model = tiny_model(tiny_tokenizer(), heads=2)
    with policy_weights(model) as weights:
        engine = VLLMEngine(model, EngineSettings(max_model_len=64, max_num_seqs=4,
                                                  kv_cache_gb=1), weights)
    engine.close()
    assert not marker.exists()


def test_the_importance_weights_cost_no_forward_of_their_own(tmp_path: Path,
                                                             vllm_engine: Any) -> None:
    """μ = 1: π_θ_old is the update's own forward, so an engine-drawn step's update runs the
    policy as often as a step drawn by ``generate``."""
    counts = {}
    for engine in ("vllm", "hf"):
        trainer = _trainer(tmp_path / engine, vllm_engine if engine == "vllm" else None,
                           rollout_engine=engine, max_steps=1, micro_batch_size=8)
        batch = trainer.sampler.sample_batch(0)  # sampling apart: not counted
        trainer.sampler.sample_batch = (  # type: ignore[method-assign]
            lambda step, batch=batch: batch)
        calls: list[int] = []
        trainer.policy.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        metrics = trainer.training_step()
        trainer.close()
        counts[engine] = len(calls)
        if engine == "vllm":
            assert metrics["sampling/importance_sampling_ratio/mean"] == pytest.approx(1, abs=1e-3)
    assert counts["vllm"] == counts["hf"] > 0, counts


@pytest.mark.parametrize(("top_k", "top_p", "num_iterations"),
                         [(0, 0.8, 1), (5, 1.0, 1), (5, 0.8, 2)])
def test_truncated_sampling_leaves_the_importance_weights_at_one(
        tmp_path: Path, vllm_engine: Any, top_k: int, top_p: float,
        num_iterations: int) -> None:
    """With top-k/top-p the engine's log-probs are over the tokens it kept; the weights
    compare the policy's on that support, so an engine drawing the policy's own samples
    weighs them 1 (over the whole vocabulary each token's ratio was the kept mass, and a
    sample's weight their product)."""
    trainer = _trainer(tmp_path, vllm_engine, top_k=top_k, top_p=top_p,
                       num_iterations=num_iterations, max_steps=2)
    for _ in range(2):
        metrics = trainer.training_step()
        assert metrics["sampling/importance_sampling_ratio/min"] > 0.99, metrics
        assert metrics["sampling/importance_sampling_ratio/mean"] == pytest.approx(1, abs=1e-3)
        assert metrics["sampling/sampling_logp_difference/mean"] < 1e-3, metrics
    trainer.close()
