"""group_advantages against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.advantages import EPS, group_advantages, nan_mean, nan_std


def test_group_scaling_by_hand() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    adv, stats = group_advantages(rewards, group_size=4, scale_rewards="group")
    std = math.sqrt(((0.5**2) * 4) / 3)  # unbiased std of [1, 0, 0, 1]
    expected = [0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 2
    assert adv[:4].tolist() == pytest.approx([expected[0], expected[1], expected[1], expected[0]])
    assert adv[4:].tolist() == [0.0] * 4
    assert stats.zero_std.tolist() == [False, True]
    assert stats.unscorable == 0


def test_batch_and_none_scaling() -> None:
    rewards = torch.tensor([1.0, 0.0, 2.0, 2.0])
    batch, _ = group_advantages(rewards, 2, "batch")
    none, _ = group_advantages(rewards, 2, "none")
    assert none.tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
    batch_std = torch.tensor([1.0, 0.0, 2.0, 2.0]).std().item()
    assert batch.tolist() == pytest.approx([0.5 / (batch_std + 1e-4), -0.5 / (batch_std + 1e-4),
                                            0.0, 0.0])


def test_advantages_sum_to_zero_per_group() -> None:
    torch.manual_seed(0)
    rewards = torch.rand(6 * 8)
    for scale in ("group", "batch", "none"):
        adv, _ = group_advantages(rewards, 8, scale)  # type: ignore[arg-type]
        assert torch.allclose(adv.view(6, 8).sum(1), torch.zeros(6), atol=1e-5)


def test_unscorable_rewards_are_left_out_and_get_zero_advantage() -> None:
    rewards = torch.tensor([1.0, float("nan"), 0.0, 0.0])
    adv, stats = group_advantages(rewards, 4, "none")
    assert adv.tolist() == pytest.approx([2 / 3, 0.0, -1 / 3, -1 / 3])
    assert stats.unscorable == 1
    all_nan, stats = group_advantages(torch.tensor([float("nan")] * 2), 2)
    assert all_nan.tolist() == [0.0, 0.0] and stats.zero_std.tolist() == [True]


def test_shape_errors() -> None:
    with pytest.raises(ValueError, match="num_groups"):
        group_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(torch.zeros(4), 2, "global")  # type: ignore[arg-type]


def test_batch_std_from_every_ranks_moments() -> None:
    from trainer.advantages import reward_moments, std_from_moments

    rank0 = torch.tensor([1.0, 0.0, 0.0, 1.0])
    rank1 = torch.tensor([5.0, float("nan"), 2.0, 2.0])
    everything = torch.cat([rank0, rank1])
    moments = reward_moments(rank0) + reward_moments(rank1)  # what all_reduce sums
    valid = everything[~torch.isnan(everything)]
    assert std_from_moments(moments) == pytest.approx(valid.std().item(), rel=1e-6)
    global_std = std_from_moments(moments)
    adv, _ = group_advantages(rank0, 2, "batch", batch_std=global_std)
    a = 0.5 / (global_std + 1e-4)
    assert adv.tolist() == pytest.approx([a, -a, -a, a])
    assert std_from_moments(reward_moments(torch.tensor([3.0]))) == 0.0


def test_flat_statistics_follow_the_group_rule() -> None:
    rewards = torch.tensor([1.0, math.nan, 3.0, 0.5])
    assert nan_mean(rewards) == pytest.approx(1.5)
    assert nan_std(rewards) == pytest.approx(1.3228757)  # unbiased, over 1, 3 and 0.5
    assert math.isnan(nan_mean(torch.tensor([math.nan, math.nan])))
    assert nan_std(torch.tensor([math.nan, 2.0])) == 0.0
    advantages, _ = group_advantages(rewards, 4)
    expected = [(r - nan_mean(rewards)) / (nan_std(rewards) + EPS) for r in (1.0, 3.0, 0.5)]
    assert advantages[[0, 2, 3]].tolist() == pytest.approx(expected)
    assert advantages[1] == 0.0
