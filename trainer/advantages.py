"""Group-relative advantages (GRPO, DeepSeekMath 2024, eq. 3 with outcome supervision).

For a group of G completions of one prompt with rewards r_1..r_G:

    A_i = (r_i - mean(r)) / (std(r) + eps)        scale_rewards="group"  (the paper)
    A_i = (r_i - mean(r)) / (std(R) + eps)        scale_rewards="batch"  (R: the whole batch,
                                                  every rank's: pass ``batch_std``)
    A_i =  r_i - mean(r)                          scale_rewards="none"   (Dr. GRPO)

``std`` is the unbiased sample std, ``eps`` = 1e-4, as in TRL. A reward may be unscorable
(NaN: the reward server could not score the item): it is left out of its group's mean and std
and gets advantage 0. A group whose rewards are all equal ("zero-std") has advantage 0 for every
member and teaches nothing; those are counted, and DAPO's dynamic sampling drops them.

``nan_mean`` and ``nan_std`` are the same rule for one flat set of rewards (the trainer's
reward metrics, a group printed by ``examples/score_groups.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

ScaleRewards = Literal["group", "batch", "none"]
EPS = 1e-4


@dataclass(frozen=True)
class GroupStats:
    zero_std: torch.Tensor  # (num_groups,) bool: every scorable reward in the group is equal
    unscorable: int  # rewards that were NaN


def as_rewards(values: Sequence[float | None]) -> torch.Tensor:
    """Rewards as this module reads them: a null (the server could not score the item) is
    NaN, never 0."""
    return torch.tensor([math.nan if v is None else float(v) for v in values])


def nan_mean(x: torch.Tensor) -> float:
    """Mean of the scorable (non-NaN) rewards; NaN when none is scorable, so that a batch
    the server could not score shows as a gap in the curve, not as a reward of 0."""
    return float(torch.nanmean(x.float())) if (~torch.isnan(x)).any() else math.nan


def nan_std(x: torch.Tensor) -> float:
    """Unbiased std of the scorable (non-NaN) rewards; 0 for fewer than two."""
    # torch.std, not _nan_std: the two round differently (up to 2 float32 ulps), and
    # each keeps its own arithmetic so that neither logged curves nor advantages move
    valid = x[~torch.isnan(x)].float()
    return float(valid.std()) if valid.numel() > 1 else 0.0


def _nan_std(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Unbiased std over the non-NaN entries (0 where fewer than two), per group along
    ``dim``: groups hold different numbers of scorable rewards, which torch.std cannot take."""
    valid = ~torch.isnan(x)
    n = valid.sum(dim) if dim is not None else valid.sum()
    mean = torch.nanmean(x, dim=dim, keepdim=dim is not None)
    sq = torch.where(valid, (x - mean) ** 2, torch.zeros_like(x))
    total = sq.sum(dim) if dim is not None else sq.sum()
    return torch.sqrt(total / (n - 1).clamp(min=1))


def group_advantages(
    rewards: torch.Tensor, group_size: int, scale_rewards: ScaleRewards = "group",
    eps: float = EPS, batch_std: float | None = None,
) -> tuple[torch.Tensor, GroupStats]:
    """``rewards`` (N,) with N = num_groups * group_size, groups contiguous → (N,) advantages.
    ``batch_std``: the std of the global batch under DDP (``reward_moments``); default: of
    ``rewards``."""
    if rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be (num_groups * {group_size},), "
                         f"got {tuple(rewards.shape)}")
    r = rewards.view(-1, group_size).float()  # (num_groups, G)
    unscorable = torch.isnan(r)
    mean = torch.nanmean(r, dim=1, keepdim=True)  # (num_groups, 1)
    mean = torch.nan_to_num(mean, nan=0.0)  # a group with no scorable reward
    advantages = r - mean
    group_std = _nan_std(r, dim=1)  # (num_groups,)
    if scale_rewards == "group":
        advantages = advantages / (group_std.unsqueeze(1) + eps)
    elif scale_rewards == "batch":
        std = _nan_std(r.flatten()) if batch_std is None else torch.tensor(batch_std)
        advantages = advantages / (std + eps)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    advantages = torch.where(unscorable, torch.zeros_like(advantages), advantages)
    valid_counts = (~unscorable).sum(1)
    spread = torch.where(unscorable, mean.expand_as(r), r)
    zero_std = ((spread.max(1).values - spread.min(1).values).abs() < 1e-8) | (valid_counts < 2)
    advantages = torch.where(zero_std.unsqueeze(1), torch.zeros_like(advantages), advantages)
    return advantages.flatten(), GroupStats(zero_std=zero_std, unscorable=int(unscorable.sum()))


def reward_moments(rewards: torch.Tensor) -> torch.Tensor:
    """(count, sum, sum of squares) of the scorable rewards, float64: summed over ranks, they
    give the global batch's std (``std_from_moments``) with one small all-reduce."""
    valid = rewards[~torch.isnan(rewards)].double()
    return torch.stack([torch.tensor(float(valid.numel()), dtype=torch.float64), valid.sum(),
                        (valid**2).sum()])


def std_from_moments(moments: torch.Tensor) -> float:
    """Unbiased std from (count, sum, sum of squares); 0 for fewer than two values."""
    n, total, squares = (float(x) for x in moments)
    if n < 2:
        return 0.0
    return max((squares - total * total / n) / (n - 1), 0.0) ** 0.5
