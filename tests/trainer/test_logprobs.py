"""Log-probs from bf16 logits against a float64 reference, on SmolLM2's vocabulary size."""

from __future__ import annotations

import pytest
import torch

from trainer import prefix
from trainer.logprobs import completion_logps, selective_log_softmax
from trainer.models import tiny_model, tiny_tokenizer

pytestmark = pytest.mark.slow  # forward and backward passes of tiny models: seconds a test

V = 49152  # SmolLM2's vocabulary


def lm_like_logits(B: int = 2, T: int = 48, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 logits shaped like a language model's (a broad background near 4, a few
    candidates near 22, where bf16's spacing is 0.125) and the sampled targets."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g) * 2.5 + 4.0
    top = torch.randint(0, V, (B, T, 5), generator=g)
    logits.scatter_(-1, top, torch.randn(B, T, 5, generator=g) * 2 + 22.0)
    targets = torch.where(torch.rand(B, T, generator=g) < 0.7, top[..., 0],
                          torch.randint(0, V, (B, T), generator=g))
    return logits.bfloat16(), targets


def reference(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logp = torch.log_softmax(logits.double() / temperature, -1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_bf16_logps_within_a_hundredth_of_a_nat(temperature: float) -> None:
    logits, targets = lm_like_logits()
    logps = selective_log_softmax(logits, targets, temperature)
    assert logps.dtype == torch.float32
    error = (logps.double() - reference(logits, targets, temperature)).abs()
    assert error.max() < 0.01, float(error.max())
    # what bf16 arithmetic gives (the old logit − logsumexp in bf16): far outside
    z = logits / temperature
    naive = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, -1)
    assert (naive.double() - reference(logits, targets, temperature)).abs().max() > 0.05


def test_bf16_gradient_matches_float64() -> None:
    logits, targets = lm_like_logits(seed=1)
    weights = torch.randn(targets.shape, generator=torch.Generator().manual_seed(2))
    ours = logits.clone().requires_grad_(True)
    (selective_log_softmax(ours, targets, 0.7) * weights).sum().backward()
    exact = logits.double().requires_grad_(True)
    (reference(exact, targets, 0.7) * weights.double()).sum().backward()
    assert ours.grad is not None and exact.grad is not None
    assert ours.grad.dtype == torch.bfloat16
    relative = (ours.grad.double() - exact.grad).norm() / exact.grad.norm()
    assert relative < 0.005, float(relative)  # bf16 rounding of the gradient itself


def test_no_float32_copy_of_the_logits_is_kept_for_backward() -> None:
    logits, targets = lm_like_logits(B=2, T=8)
    logits.requires_grad_(True)
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        selective_log_softmax(logits, targets, 0.7)
    full_vocab = [t for t in saved if t.shape[-1] == V]
    assert len(full_vocab) == 1 and full_vocab[0].dtype == torch.bfloat16
    assert full_vocab[0].data_ptr() == logits.data_ptr()  # the model's own output, no copy


def test_float32_matches_log_softmax_and_autograd() -> None:
    logits = torch.randn(3, 5, 11, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (3, 5))
    torch.autograd.gradcheck(lambda x: selective_log_softmax(x, targets, 0.8), (logits,))
    assert torch.allclose(selective_log_softmax(logits, targets, 0.8),
                          reference(logits, targets, 0.8))


def test_completion_logps_under_autocast_are_float32_and_close() -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer)
    ids = torch.randint(4, len(tokenizer), (2, 12))
    attn = torch.ones_like(ids)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = completion_logps(model, ids, attn, 5, temperature=0.7)
    exact = completion_logps(model.double(), ids, attn, 5, temperature=0.7)
    assert fast.dtype == torch.float32 and fast.shape == (2, 5)
    assert (fast.double() - exact).abs().max() < 0.05  # bf16 matmuls; the softmax is exact


@pytest.mark.parametrize("shared", [False, True])
def test_a_left_padded_row_of_an_absolute_position_model_gets_its_sampling_logps(
        shared: bool) -> None:
    """GPT-2 adds a learned embedding per position: a left-padded row must count its
    positions from its first real token in the update, as ``generate`` counts them when it
    samples, or its log-probs are those of another sequence; ``shared``: sampling from a
    prefilled prompt cache and the update's shared prompt pass (trainer.prefix)."""
    import transformers
    from transformers import GenerationConfig

    from trainer.models import prepare_tokenizer
    from trainer.rollout import Prompt, encode_prompts

    tokenizer = prepare_tokenizer(tiny_tokenizer())
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=4, n_positions=128,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id)).eval()
    G, T = 2, 5
    prompts = [Prompt("say 7: a much longer prompt=>", True), Prompt("hi=>", True)]
    ids, mask, _ = encode_prompts(tokenizer, prompts, 64)
    ids, mask = ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0)
    assert (mask[G:] == 0).any()  # the second group is left-padded
    config = GenerationConfig(do_sample=False, max_new_tokens=T, min_new_tokens=T,
                              output_logits=True, return_dict_in_generate=True,
                              pad_token_id=tokenizer.pad_token_id)
    with torch.no_grad():
        cache = prefix.prefill(model, ids[::G], mask[::G], G) if shared else None
        extra = {prefix.cache_kwarg(model): cache} if shared else {}
        assert (cache is not None) == shared
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                             **extra)
        completion = out.sequences[:, ids.shape[1]:]  # (2G, T)
        sampled = torch.log_softmax(torch.stack(out.logits, 1).float(), -1).gather(
            -1, completion.unsqueeze(-1)).squeeze(-1)
        full = torch.cat([ids, completion], 1)
        attn = torch.cat([mask, torch.ones_like(completion)], 1)
        update = completion_logps(model, full, attn, T, 1.0, model if shared else None)
        alone = full[G:G + 1, -(T + mask[G].sum()):]  # the short prompt without padding
        unpadded = completion_logps(model, alone, torch.ones_like(alone), T)
    torch.testing.assert_close(update, sampled, rtol=0, atol=1e-5)
    torch.testing.assert_close(update[G:G + 1], unpadded, rtol=0, atol=1e-5)
    assert prefix.shareable(model)  # the shared pass was used, not fallen back from
