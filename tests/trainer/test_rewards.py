"""Combining several verifiers' scores: a null (what the completion could not cause) moves no
advantage and erases nothing the other verifiers said."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from trainer.advantages import group_advantages
from trainer.config import RewardSpec
from trainer.rewards import RewardScorer, combine_scores


def test_one_null_verifier_does_not_null_the_reward() -> None:
    # two verifiers, one group of 3: the second could not score completion 0
    rewards = combine_scores([(1.0, [0.0, 1.0, 1.0]), (0.5, [None, 1.0, 0.0])], group_size=3)
    assert not any(math.isnan(r) for r in rewards)
    # the null takes the group mean of that verifier (0.5): a wrong answer stays wrong
    assert rewards == pytest.approx([0.0 + 0.5 * 0.5, 1.0 + 0.5, 1.0 + 0.0])


def test_null_everywhere_is_nan_and_null_in_a_whole_group_is_neutral() -> None:
    rewards = combine_scores([(1.0, [None, 1.0, 0.0, 1.0]), (1.0, [None, None, None, None])],
                             group_size=2)
    assert math.isnan(rewards[0]) and rewards[1:] == [1.0, 0.0, 1.0]


def test_a_null_verifier_moves_no_advantage() -> None:
    scores_a = [1.0, 0.0, 1.0, 0.0]
    with_null = combine_scores([(1.0, scores_a), (1.0, [None, 0.5, 0.5, 0.5])], group_size=4)
    without = combine_scores([(1.0, scores_a), (1.0, [0.5, 0.5, 0.5, 0.5])], group_size=4)
    a, _ = group_advantages(torch.tensor(with_null), 4, "none")
    b, _ = group_advantages(torch.tensor(without), 4, "none")
    assert torch.allclose(a, b)


def test_groups_must_divide_the_batch() -> None:
    with pytest.raises(ValueError, match="groups of 4"):
        combine_scores([(1.0, [1.0] * 6)], group_size=4)


class FixedClient:
    """The reward server's answer for a batch, fixed (the network edge)."""

    def __init__(self, rewards: list[float | None]) -> None:
        self.rewards_out = rewards

    def rewards(self, items: list[dict[str, Any]]) -> SimpleNamespace:
        assert len(items) == len(self.rewards_out)
        return SimpleNamespace(rewards=self.rewards_out)


def test_scorer_with_two_verifiers() -> None:
    specs = [RewardSpec(verifier="math"), RewardSpec(verifier="format", weight=0.5)]
    # math: [0, 1]; format: [None, 1] (e.g. its engine was away for the first item)
    scorer = RewardScorer(specs, FixedClient([0.0, 1.0, None, 1.0]))  # type: ignore[arg-type]
    rows = [{"answer": "1"}, {"answer": "1"}]
    batch = scorer.score(["a", "b"], rows, group_size=2)
    scorer.close()
    assert batch.rewards == pytest.approx([0.5, 1.5])  # was NaN for the first
    assert batch.per_verifier == {"math": [0.0, 1.0], "format": [None, 1.0]}
    assert batch.correct == [False, True]
