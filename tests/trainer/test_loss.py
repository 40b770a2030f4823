"""policy_loss against hand-computed values and invariants."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.loss import policy_loss


def test_ratio_one_beta_zero_is_minus_mean_advantage() -> None:
    logps = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = torch.tensor([0.5, -1.5])
    loss, m = policy_loss(logps, None, None, adv, mask)
    assert loss.item() == pytest.approx(-adv.mean().item())
    assert m["ratio_mean"] == pytest.approx(1.0)
    assert m["clip_ratio/region_mean"] == 0.0


def test_gradient_is_advantage_weighted_logprob_gradient() -> None:
    # at ratio 1 the GRPO gradient is −A_i / |o_i| per token
    logps = torch.zeros(2, 2, requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = torch.tensor([1.0, -2.0])
    loss, _ = policy_loss(logps, None, None, adv, mask)
    loss.backward()
    expected = torch.tensor([[-1.0 / 2 / 2, -1.0 / 2 / 2], [2.0 / 1 / 2, 0.0]])
    assert torch.allclose(logps.grad, expected)


def _case():
    # ratios exp(0.5)=1.6487 (above 1.2) and exp(-0.5)=0.6065 (below 0.8)
    logps = torch.tensor([[0.5, -0.5], [0.5, -0.5]])
    old = torch.zeros(2, 2)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    return logps, old, mask, adv


def test_clipping_by_hand() -> None:
    logps, old, mask, adv = _case()
    loss, m = policy_loss(logps, old, None, adv, mask, loss_type="bnpo")
    e = math.exp
    # seq 0 (A=+1): min(1.6487, 1.2) = 1.2 → −1.2 ; min(0.6065, 0.8)=0.6065 → −0.6065
    # seq 1 (A=−1): min(−1.6487, −1.2) = −1.6487 → +1.6487 ; second token masked
    per_token = [-1.2, -e(-0.5), e(0.5)]
    assert loss.item() == pytest.approx(sum(per_token) / 3, rel=1e-6)
    # high-clipped: ratio > 1.2 with A > 0 → token (0,0); low-clipped: ratio < 0.8 with A < 0
    # → none counted (token (1,1) is masked)
    assert m["clip_ratio/high_mean"] == pytest.approx(1 / 3)
    assert m["clip_ratio/low_mean"] == 0.0
    assert m["ratio_mean"] == pytest.approx((e(0.5) + e(-0.5) + e(0.5)) / 3)


@pytest.mark.parametrize(
    ("loss_type", "expected"),
    [
        # per-token losses: seq0 [−1.2, −0.60653], seq1 [+1.64872]
        ("grpo", ((-1.2 - math.exp(-0.5)) / 2 + math.exp(0.5)) / 2),
        ("bnpo", (-1.2 - math.exp(-0.5) + math.exp(0.5)) / 3),
        ("dr_grpo", (-1.2 - math.exp(-0.5) + math.exp(0.5)) / (2 * 4)),
        ("dapo", (-1.2 - math.exp(-0.5) + math.exp(0.5)) / 3),
    ],
)
def test_loss_types_differ_only_in_the_normaliser(loss_type: str, expected: float) -> None:
    logps, old, mask, adv = _case()
    loss, _ = policy_loss(logps, old, None, adv, mask, loss_type=loss_type,  # type: ignore[arg-type]
                          max_completion_length=4)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_dapo_uses_the_global_token_count() -> None:
    logps, old, mask, adv = _case()
    loss, _ = policy_loss(logps, old, None, adv, mask, loss_type="dapo", normalizer=12)
    assert loss.item() == pytest.approx((-1.2 - math.exp(-0.5) + math.exp(0.5)) / 12, rel=1e-6)


def test_clip_higher_is_asymmetric() -> None:
    logps, old, mask, adv = _case()
    _, symmetric = policy_loss(logps, old, None, adv, mask, epsilon_low=0.2, epsilon_high=0.2)
    _, higher = policy_loss(logps, old, None, adv, mask, epsilon_low=0.2, epsilon_high=0.7)
    assert symmetric["clip_ratio/high_mean"] > 0 and higher["clip_ratio/high_mean"] == 0.0


def test_sequence_level_importance_sampling_gspo() -> None:
    logps = torch.tensor([[0.2, 0.4, 9.0]])  # the third token is masked out
    old = torch.zeros(1, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0])
    loss, m = policy_loss(logps, old, None, adv, mask, importance_sampling_level="sequence",
                          epsilon_high=1.0)
    seq_ratio = math.exp((0.2 + 0.4) / 2)  # length-normalised sequence log-ratio
    assert loss.item() == pytest.approx(-seq_ratio, rel=1e-6)
    assert m["ratio_mean"] == pytest.approx(seq_ratio, rel=1e-6)


def test_k3_kl_penalty_by_hand() -> None:
    logps = torch.tensor([[-1.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    mask = torch.ones(1, 2)
    adv = torch.tensor([0.0])
    loss, m = policy_loss(logps, None, ref, adv, mask, beta=0.1)
    kl = [math.exp(d) - d - 1 for d in (-0.5, 1.0)]
    assert m["kl"] == pytest.approx(sum(kl) / 2, rel=1e-6)
    assert loss.item() == pytest.approx(0.1 * sum(kl) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="ref_logps"):
        policy_loss(logps, None, None, adv, mask, beta=0.1)


def test_kl_is_zero_when_policy_equals_reference() -> None:
    logps = torch.randn(3, 5)
    _, m = policy_loss(logps, None, logps.clone(), torch.zeros(3), torch.ones(3, 5), beta=0.04)
    assert m["kl"] == pytest.approx(0.0, abs=1e-7)


def test_bad_arguments() -> None:
    x, mask, adv = torch.zeros(1, 1), torch.ones(1, 1), torch.zeros(1)
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(x, None, None, adv, mask, loss_type="ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(x, None, None, adv, mask, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="importance_sampling_level"):
        policy_loss(x, None, None, adv, mask, importance_sampling_level="group")  # type: ignore[arg-type]


def test_gspo_is_a_mean_over_sequences_of_any_length() -> None:
    # lengths 1 and 3: a token-sum reduction would weight the second 3x
    logps = torch.tensor([[0.1, 0.0, 0.0], [0.05, -0.02, 0.03]])
    old = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -2.0])
    loss, _ = policy_loss(logps, old, None, adv, mask, importance_sampling_level="sequence")
    s = [math.exp(0.1), math.exp((0.05 - 0.02 + 0.03) / 3)]
    assert loss.item() == pytest.approx((-s[0] * 1.0 + s[1] * 2.0) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="loss_type must be 'grpo'"):
        policy_loss(logps, old, None, adv, mask, importance_sampling_level="sequence",
                    loss_type="dapo")


def test_normaliser_counts_the_whole_batch_over_ranks() -> None:
    from trainer.loss import loss_normalizer

    # 2 ranks, 40 tokens and 8 sequences in all, 15 tokens on this rank
    kw = dict(tokens=40.0, sequences=8.0, max_completion_length=10, world=2, rank_tokens=15.0)
    assert loss_normalizer("dapo", **kw) == 20.0  # DDP's average over 2 ranks undone
    assert loss_normalizer("grpo", **kw) == 4.0
    assert loss_normalizer("dr_grpo", **kw) == 40.0
    assert loss_normalizer("bnpo", **kw) == 15.0  # per process, as TRL


def test_a_given_normaliser_divides_the_sum() -> None:
    logps, old, mask, adv = _case()
    per_token_sum = -1.2 - math.exp(-0.5) + math.exp(0.5)
    for loss_type in ("bnpo", "dr_grpo", "dapo"):
        loss, _ = policy_loss(logps, old, None, adv, mask, loss_type=loss_type,  # type: ignore[arg-type]
                              max_completion_length=4, normalizer=6.0)
        assert loss.item() == pytest.approx(per_token_sum / 6, rel=1e-6)
    loss, _ = policy_loss(logps, old, None, adv, mask, loss_type="grpo", normalizer=4.0)
    assert loss.item() == pytest.approx(((-1.2 - math.exp(-0.5)) / 2 + math.exp(0.5)) / 4)
