"""Truncated importance sampling (trainer/sampling_correction.py) and its place in the
loss: weights π_θ_old/μ per token or per sequence, clipped or masked as TRL's modes do."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from trainer.loss import policy_loss
from trainer.sampling_correction import kept_log_mass, on_sampled_support, sampling_weights

OLD = torch.log(torch.tensor([[0.5, 0.4, 0.9], [0.2, 0.3, 0.1]]))
ENGINE = torch.log(torch.tensor([[0.25, 0.4, 0.3], [0.2, 0.6, 0.9]]))
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # the last token: padding


def test_token_truncate_clips_each_tokens_ratio() -> None:
    w, metrics = sampling_weights(OLD, ENGINE, MASK, "token_truncate", 0.6, 2.5)
    expected = torch.tensor([[2.0, 1.0, 2.5], [1.0, 0.6, 1.0]])  # 3.0 → 2.5, 0.5 → 0.6
    assert torch.allclose(w, expected, atol=1e-6)
    assert metrics["sampling/importance_sampling_ratio/max"] == pytest.approx(2.5)
    assert metrics["sampling/importance_sampling_ratio/min"] == pytest.approx(0.6)
    # |log π_old − log μ| over the five sampled tokens only: ln 2, 0, ln 3, 0, ln 2
    gap = (2 * math.log(2) + math.log(3)) / 5
    assert metrics["sampling/sampling_logp_difference/mean"] == pytest.approx(gap, rel=1e-5)
    assert metrics["sampling/sampling_logp_difference/max"] == pytest.approx(math.log(3),
                                                                             rel=1e-5)


def test_token_mask_drops_the_tokens_outside_the_bounds() -> None:
    w, _ = sampling_weights(OLD, ENGINE, MASK, "token_mask", 0.6, 2.5)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, 0.0], [1.0, 0.0, 1.0]]), atol=1e-6)


def test_sequence_modes_weight_a_completion_by_the_product_of_its_tokens_ratios() -> None:
    w, metrics = sampling_weights(OLD, ENGINE, MASK, "sequence_truncate", None, 3.0)
    assert w.shape == (2, 1)
    assert torch.allclose(w[:, 0], torch.tensor([3.0, 0.5]), atol=1e-5)  # 2·1·3 → 3; 1·0.5
    w, metrics = sampling_weights(OLD, ENGINE, MASK, "sequence_mask", None, 3.0)
    assert torch.allclose(w[:, 0], torch.tensor([0.0, 0.5]), atol=1e-5)  # 6 > 3: dropped
    assert metrics["sampling/importance_sampling_ratio/mean"] == pytest.approx(0.25, rel=1e-5)


def test_the_same_policy_weighs_every_sample_one() -> None:
    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        w, metrics = sampling_weights(OLD, OLD.clone(), MASK, mode, None, 3.0)  # type: ignore[arg-type]
        assert torch.equal(w, torch.ones_like(w))
        assert metrics["sampling/sampling_logp_difference/max"] == 0.0


def _gradient(weights: torch.Tensor | None, beta: float = 0.0) -> torch.Tensor:
    logps = OLD.clone().requires_grad_(True)
    ref = OLD - 0.3
    loss, _ = policy_loss(logps, OLD, ref if beta else None, torch.tensor([1.0, -1.0]), MASK,
                          loss_type="dapo", beta=beta, sampling_weights=weights)
    loss.backward()
    assert logps.grad is not None
    return logps.grad


def test_the_loss_weighs_each_tokens_policy_term_and_not_its_kl() -> None:
    w = torch.tensor([[2.0, 0.0, 1.0], [0.5, 1.0, 1.0]])
    assert torch.allclose(_gradient(w), w * _gradient(None))
    kl_only = _gradient(None, beta=0.1) - _gradient(None)
    assert torch.allclose(_gradient(w, beta=0.1) - _gradient(w), kl_only, atol=1e-7)
    per_sequence = torch.tensor([[0.0], [3.0]])  # (B, 1) broadcasts over its tokens
    assert torch.allclose(_gradient(per_sequence), per_sequence * _gradient(None))


def test_a_token_without_a_finite_engine_log_prob_weighs_one_and_long_gaps_stay_bounded(
        ) -> None:
    engine = ENGINE.clone()
    engine[0, 1] = torch.nan
    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        w, _ = sampling_weights(OLD, engine, MASK, mode, None, 3.0)  # type: ignore[arg-type]
        assert torch.isfinite(w).all(), mode
    # a 0.05 gap on each of 4,096 tokens: exp(204.8) is inf; masked out, or clipped, never inf
    old, far = torch.zeros(1, 4096), torch.full((1, 4096), -0.05)
    ones = torch.ones(1, 4096)
    assert sampling_weights(old, far, ones, "sequence_mask", None, 3.0)[0].item() == 0.0
    assert sampling_weights(old, far, ones, "sequence_truncate", None, 3.0)[0].item() == 3.0


def _nucleus(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """The tokens a sampler keeps, written out as the rule reads: the top_k most likely,
    then of those (renormalised) the most likely until their mass reaches top_p."""
    keep = torch.zeros_like(probs, dtype=torch.bool)
    for index in itertools.product(*map(range, probs.shape[:-1])):
        p = probs[index]
        order = p.argsort(descending=True)
        if top_k:
            order = order[:top_k]
        q = p[order] / p[order].sum()
        before = q.cumsum(0) - q  # the mass of the tokens more likely than each
        keep[index][order[before < top_p]] = True
    return keep


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 0.9), (10, 1.0), (10, 0.8)])
def test_the_kept_mass_follows_the_samplers_rule(top_k: int, top_p: float) -> None:
    generator = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(2, 5, 50, generator=generator)
    probs = (logits / 0.7).softmax(-1)
    expected = (probs * _nucleus(probs, top_k, top_p)).sum(-1).log()
    assert torch.allclose(kept_log_mass(logits, 0.7, top_k, top_p), expected, atol=1e-5)


def test_truncated_sampling_alone_leaves_the_importance_weights_at_one() -> None:
    """The engine gives log-probs over the tokens top-p kept (renormalised there), the
    trainer's π_θ_old is over the whole vocabulary: with the same weights every token's
    ratio would be the kept mass (< 1), and under sequence_mask a sample's weight their
    product, its policy term scaled towards 0. On the same support the weights are 1."""
    generator = torch.Generator().manual_seed(0)
    B, T, V, top_p = 8, 64, 50, 0.9
    logits = torch.randn(B, T, V, generator=generator)
    probs = logits.softmax(-1)
    keep = _nucleus(probs, 0, top_p)
    nucleus = torch.where(keep, probs, 0.0)
    nucleus = nucleus / nucleus.sum(-1, keepdim=True)
    tokens = torch.multinomial(nucleus.view(-1, V), 1, generator=generator).view(B, T)
    old = probs.log().gather(-1, tokens[..., None])[..., 0]  # the policy's π_θ_old
    engine = nucleus.log().gather(-1, tokens[..., None])[..., 0]  # μ: vLLM's processed
    assert float(sampling_weights(old, engine, torch.ones(B, T), "sequence_mask", None,
                                  3.0)[0].mean()) < 0.01  # the bias, left alone
    w, _ = sampling_weights(on_sampled_support(old, kept_log_mass(logits, 1.0, 0, top_p)),
                            engine, torch.ones(B, T), "sequence_mask", None, 3.0)
    assert torch.allclose(w, torch.ones_like(w), atol=1e-4)
