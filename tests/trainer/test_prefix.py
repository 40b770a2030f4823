"""Shared prompts (trainer/prefix.py): running a group's prompt once gives the log-probs,
gradients, samples and training run of running it G times, under gradient checkpointing, LoRA
and bf16 autocast too; a model that cannot share is noticed and run whole."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from trainer import prefix
from trainer.config import GRPOConfig
from trainer.data import load_rows
from trainer.logprobs import completion_logps
from trainer.models import load_model, prepare_policy, prepare_tokenizer
from trainer.rewards import FunctionScorer
from trainer.rollout import Sampling, format_prompt, generate
from trainer.train import GRPOTrainer, UpdateBatch, seed_everything

pytestmark = pytest.mark.slow  # trains tiny models: seconds a test

G, T = 4, 6


def group_batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two groups of G: prompts of 7 and 4 tokens (the second left-padded), completions of
    different lengths (masked after their end)."""
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.zeros(2, 7, dtype=torch.long)
    prompt_mask = torch.zeros(2, 7, dtype=torch.long)
    prompt_ids[0] = torch.randint(5, vocab, (7,), generator=g)
    prompt_ids[1, 3:] = torch.randint(5, vocab, (4,), generator=g)
    prompt_mask[0], prompt_mask[1, 3:] = 1, 1
    completion = torch.randint(5, vocab, (2 * G, T), generator=g)
    cmask = torch.ones_like(completion)
    cmask[0, 4:] = cmask[5, 2:] = 0
    ids = torch.cat([prompt_ids.repeat_interleave(G, 0), completion], 1)
    attn = torch.cat([prompt_mask.repeat_interleave(G, 0), cmask], 1)
    return ids, attn


def logps_and_gradient(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor,
                       shared: bool) -> tuple[torch.Tensor, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    logps = completion_logps(model, ids, attn, T, 0.7, model if shared else None)
    weights = torch.randn(logps.shape, generator=torch.Generator().manual_seed(1))
    (logps * weights * attn[:, -T:]).sum().backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logps.detach(), grad


@pytest.mark.parametrize("variant", ["plain", "gradient-checkpointing", "lora"])
def test_shared_prompt_gives_the_same_logps_and_gradient(variant: str) -> None:
    model, _ = load_model("tiny", torch.float32, 0)
    model = prepare_policy(model, torch.device("cpu"), variant == "gradient-checkpointing")
    if variant == "lora":
        from trainer import lora

        model = lora.add_adapter(model, 4, 8.0, 0.0, None)
    model.train()
    ids, attn = group_batch(model.config.vocab_size)
    calls: list[int] = []
    model.register_forward_pre_hook(lambda module, args, kwargs: calls.append(
        kwargs["input_ids"].shape[0]), with_kwargs=True)
    whole, whole_grad = logps_and_gradient(model, ids, attn, shared=False)
    calls.clear()
    shared, shared_grad = logps_and_gradient(model, ids, attn, shared=True)
    assert calls == [2, 2 * G]  # one pass over the 2 distinct prompts, one over 8 completions
    torch.testing.assert_close(shared, whole, rtol=0, atol=1e-5)
    torch.testing.assert_close(shared_grad, whole_grad, rtol=1e-4, atol=1e-6)
    assert whole_grad.abs().max() > 0


def test_shared_prompt_under_bf16_autocast_stays_within_bf16_noise() -> None:
    model, _ = load_model("tiny", torch.float32, 0)
    ids, attn = group_batch(model.config.vocab_size)
    with torch.no_grad():
        exact = completion_logps(model.double(), ids, attn, T, 0.7)
        model.float()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            shared = completion_logps(model, ids, attn, T, 0.7, model)
            whole = completion_logps(model, ids, attn, T, 0.7)
    mask = attn[:, -T:].bool()
    shared_error = (shared.double() - exact)[mask].abs().max()
    whole_error = (whole.double() - exact)[mask].abs().max()
    assert shared.dtype == torch.float32
    assert shared_error < max(2 * whole_error, 0.02)


def test_group_rows_merges_neighbours_only() -> None:
    ids = torch.tensor([[1, 2], [1, 2], [3, 4], [1, 2]])
    mask = torch.ones_like(ids)
    first, inverse = prefix.group_rows(ids, mask)
    assert first.tolist() == [0, 2, 3]
    assert inverse.tolist() == [0, 0, 1, 2]
    mask[1, 0] = 0  # same ids, another mask: another prompt
    assert prefix.group_rows(ids, mask)[0].tolist() == [0, 1, 2, 3]


def test_nothing_to_share_runs_whole_sequences() -> None:
    model, _ = load_model("tiny", torch.float32, 0)
    ids, attn = group_batch(model.config.vocab_size)
    rows = [0, G]  # one row of each group: every prompt distinct
    assert prefix.shared_prompt_logits(model, model, ids[rows], attn[rows], T) is None


def test_one_completion_token_runs_whole_sequences() -> None:
    """Nothing to share after the prompt's own last position; and under DDP the wrapper's
    forward, which arms the gradient all-reduce, must run (test_prefix_distributed.py)."""
    model, _ = load_model("tiny", torch.float32, 0)
    ids, attn = group_batch(model.config.vocab_size)
    ids, attn = ids[:, : 7 + 1], attn[:, : 7 + 1]
    assert prefix.shared_prompt_logits(model, model, ids, attn, 1) is None


def test_a_model_with_recurrent_layers_runs_whole_sequences() -> None:
    """LFM2's convolution layers keep a state, not keys and values: no shared prompt, in the
    update or in sampling, and no crash."""
    import transformers

    config = transformers.Lfm2Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2,
                                      layer_types=["conv", "full_attention"])
    torch.manual_seed(0)
    model = transformers.Lfm2ForCausalLM(config).train()
    assert not prefix.shareable(model)
    ids, attn = group_batch(64)
    shared = completion_logps(model, ids, attn, T, 1.0, model)
    torch.testing.assert_close(shared, completion_logps(model, ids, attn, T, 1.0))
    assert prefix.prefill(model.eval(), ids[::G, :7], attn[::G, :7], G) is None


def length_dependent_rope_model(kind: str) -> torch.nn.Module:
    """A tiny model whose RoPE frequencies switch once a sequence passes 8 positions: Phi-3's
    longrope (its short and long factors) or Llama with dynamic NTK scaling."""
    import transformers

    common = dict(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2)
    torch.manual_seed(0)
    if kind == "longrope":
        half = 64 // 4 // 2
        config = transformers.Phi3Config(
            **common, max_position_embeddings=64, original_max_position_embeddings=8,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                             "short_factor": [1.0] * half,
                             "long_factor": [1.0 + 3 * i for i in range(half)]})
        return transformers.Phi3ForCausalLM(config).eval()
    config = transformers.LlamaConfig(  # dynamic NTK scales past max_position_embeddings
        **common, max_position_embeddings=8,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0})
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("kind", ["longrope", "dynamic"])
def test_a_rope_that_depends_on_the_length_runs_whole_sequences(kind: str) -> None:
    """Run alone, a prompt of 7 positions gets the short-sequence rotations; within its 13-token
    sequences it gets the long ones (Phi-3/4-mini past 4096 tokens): a shared prompt pass would
    hand the completions other keys than the whole forward computes."""
    model = length_dependent_rope_model(kind)
    ids, attn = group_batch(64)
    with torch.no_grad():
        whole = completion_logps(model, ids, attn, T, 1.0)
        shared = completion_logps(model, ids, attn, T, 1.0, model)
    torch.testing.assert_close(shared, whole, rtol=0, atol=1e-5)
    assert not prefix.shareable(model)
    assert prefix.prefill(model, ids[::G, :7], attn[::G, :7], G) is None


class CacheIgnoring(torch.nn.Module):
    """A model that takes a cache argument and never uses it."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                cache: object = None, position_ids: torch.Tensor | None = None,
                **kwargs: object) -> object:
        kwargs.pop("past_key_values", None)
        return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, **kwargs)


def test_a_model_that_ignores_the_cache_falls_back_to_whole_sequences(monkeypatch) -> None:
    model, _ = load_model("tiny", torch.float32, 0)
    ids, attn = group_batch(model.config.vocab_size)
    monkeypatch.setattr(prefix, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            got = completion_logps(CacheIgnoring(model), ids, attn, T, 1.0,
                                   CacheIgnoring(model))
            expected = completion_logps(model, ids, attn, T, 1.0)
    torch.testing.assert_close(got, expected)
    assert any("shared-prompt forward unavailable" in str(w.message) for w in caught)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_prefilled_sampling_draws_the_same_tokens(temperature: float) -> None:
    model, tokenizer = load_model("tiny", torch.float32, 0)
    prepare_tokenizer(tokenizer)
    model.eval()
    prompts = ["say 7: abc", "say 7: a much longer prompt abcdefgh"]  # left padding
    prompts = [format_prompt({"p": p}, tokenizer, "p", None, True) for p in prompts]
    draws = {}
    for share in (False, True):
        torch.manual_seed(0)
        sampling = Sampling(8, 128, 12, temperature, share_prompts=share)
        draws[share] = generate(model, tokenizer, [{}, {}], prompts, sampling)
    assert torch.equal(draws[True].completion_ids, draws[False].completion_ids)
    assert torch.equal(draws[True].prompt_ids, draws[False].prompt_ids)
    assert len(set(draws[True].texts[:8])) > 1  # G different samples of one prompt


def test_prefilled_generate_sees_the_logits_of_a_whole_prompt() -> None:
    """The samples above could agree by luck; the logits of every step must agree."""
    from transformers import GenerationConfig

    model, tokenizer = load_model("tiny", torch.float32, 0)
    prepare_tokenizer(tokenizer)
    model.eval()
    enc = tokenizer(["say 7: abc", "say 7: a much longer prompt abcdefgh"],
                    return_tensors="pt", padding=True)
    ids, mask = enc.input_ids, enc.attention_mask
    config = GenerationConfig(do_sample=False, max_new_tokens=6, output_logits=True,
                              return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id)
    steps = {}
    for share in (False, True):
        cache = prefix.prefill(model, ids, mask, G) if share else None
        extra = {prefix.cache_kwarg(model): cache} if share else {}
        with torch.no_grad():
            out = model.generate(input_ids=ids.repeat_interleave(G, 0),
                                 attention_mask=mask.repeat_interleave(G, 0),
                                 generation_config=config, **extra)
        steps[share] = torch.stack(out.logits)
    torch.testing.assert_close(steps[True], steps[False], rtol=0, atol=1e-5)


def test_micro_batch_drops_only_columns_that_are_padding_in_every_row() -> None:
    ids = torch.arange(2 * 9).view(2, 9)
    attn = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 0, 0],
                         [0, 0, 0, 1, 1, 1, 0, 0, 0]])  # P = 5, T = 4
    batch = UpdateBatch(ids, attn, 4, attn[:, 5:].float(), torch.zeros(2),
                        old_logps=torch.ones(2, 4))
    part = batch.micro(slice(0, 2))
    assert part.T == 2  # the longest completion
    assert part.ids.tolist() == [[2, 3, 4, 5, 6], [11, 12, 13, 14, 15]]
    assert part.attn.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 0]]
    assert part.old_logps.shape == (2, 2) and part.loss_mask.shape == (2, 2)


def test_training_with_and_without_sharing_ends_at_the_same_weights(tmp_path: Path) -> None:
    """Two GRPO steps of the tiny model (μ = 2 and β > 0: old and reference log-probs too),
    sampling and update shared or not: the same samples and weights, up to float rounding."""
    weights = {}
    for share in (False, True):
        seed_everything(0)
        model, tokenizer = load_model("tiny", torch.float32, 0)
        config = GRPOConfig(model="tiny", dataset="arithmetic", output_dir=str(tmp_path),
                            max_steps=2, prompts_per_step=2, num_generations=4,
                            generation_chunk=2, micro_batch_size=4, max_completion_length=8,
                            learning_rate=1e-3, beta=0.04, num_iterations=2,
                            share_prompts=share, progress_bar=False)
        trainer = GRPOTrainer(model, tokenizer, load_rows("arithmetic"), config, None,
                              scorer=FunctionScorer(lambda texts, rows: [
                                  float(len(t) % 3 == 0) for t in texts]))
        for _ in range(2):
            trainer.training_step()
        trainer.scorer.close()
        weights[share] = torch.cat([p.detach().flatten() for p in trainer.policy.parameters()])
    start = torch.cat([p.flatten() for p in load_model("tiny", torch.float32, 0)[0]
                       .parameters()])
    assert (weights[True] - start).abs().max() > 1e-4  # the steps did move the weights
    torch.testing.assert_close(weights[True], weights[False], rtol=1e-4, atol=1e-5)
