"""reasoning_gym datasets in the trainer's config: rows that carry what the server's
reasoning_gym verifier needs, a held-out split that shares no question with training, and
errors that name the field and the known tasks."""

from __future__ import annotations

import pytest

from reward_server.client import RewardClient
from trainer.config import ConfigError, GRPOConfig, RewardSpec, load_config
from trainer.data import load_datasets
from trainer.gym_tasks import gym_rows, held_out_rows
from trainer.rewards import RewardScorer

pytest.importorskip("reasoning_gym")  # the reasoning-gym extra, in the dev install

EASY = {"basic_arithmetic": {"min_terms": 2, "max_terms": 2, "max_digits": 1,
                             "operators": ["+"], "allow_parentheses": False,
                             "allow_negation": False}}
GYM_REWARD = RewardSpec(verifier="reasoning_gym", params={"extract": "last_line"},
                        columns={"entry": "entry", "task": "task", "config": "config"})


def test_rows_carry_the_entry_task_and_config() -> None:
    rows = gym_rows("reasoning_gym:basic_arithmetic", 5, 7, EASY)
    assert len(rows) == 5
    row = rows[0]
    assert row["prompt"] == row["question"] == row["entry"]["question"]
    assert row["answer"] == row["entry"]["answer"]
    assert row["task"] == "basic_arithmetic" == row["entry"]["metadata"]["source_dataset"]
    assert row["config"]["max_terms"] == 2 and row["config"]["operators"] == ["+"]
    # seeded: the same rows everywhere, another seed another set
    assert gym_rows("reasoning_gym:basic_arithmetic", 5, 7, EASY) == rows
    assert gym_rows("reasoning_gym:basic_arithmetic", 5, 8, EASY) != rows


def test_several_tasks_interleave() -> None:
    rows = gym_rows("reasoning_gym:basic_arithmetic, leg_counting", 3, 0)
    assert [r["task"] for r in rows] == ["basic_arithmetic", "leg_counting"] * 3


def test_held_out_rows_share_no_question_with_training() -> None:
    # one-digit sums have 100 questions: 150 training entries cover most of them, and the
    # library's seed s + 1 would repeat seed s's entries shifted by one
    train = gym_rows("reasoning_gym:basic_arithmetic", 150, 0, EASY)
    shifted = gym_rows("reasoning_gym:basic_arithmetic", 150, 1, EASY)
    assert [r["prompt"] for r in shifted[:-1]] == [r["prompt"] for r in train[1:]]
    seen = {r["prompt"] for r in train}
    held = held_out_rows("reasoning_gym:basic_arithmetic", 10, 0, seen, EASY)
    assert len(held) == 10 and not seen & {r["prompt"] for r in held}
    assert len({r["prompt"] for r in held}) == 10


def test_a_task_too_small_to_hold_out_says_so() -> None:
    train = gym_rows("reasoning_gym:basic_arithmetic", 2000, 0, EASY)
    with pytest.raises(ValueError, match="held-out questions are not training prompts"):
        held_out_rows("reasoning_gym:basic_arithmetic", 64, 0, {r["prompt"] for r in train},
                      EASY)


def test_the_config_loads_train_and_eval_splits() -> None:
    config = GRPOConfig(dataset="reasoning_gym:basic_arithmetic,leg_counting",
                        eval_dataset="reasoning_gym:basic_arithmetic,leg_counting",
                        dataset_size=20, dataset_seed=3, eval_samples=7,
                        dataset_options=EASY, rewards=[GYM_REWARD])
    train, held = load_datasets(config)
    assert len(train) == 40 and held is not None and len(held) == 7
    assert {r["task"] for r in held} == {"basic_arithmetic", "leg_counting"}
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}


@pytest.mark.parametrize(("overrides", "message"), [
    (["dataset=reasoning_gym:no_such_task"], "unknown reasoning_gym task 'no_such_task'.*"
                                              "known: .*basic_arithmetic"),
    (["eval_dataset=reasoning_gym:basic_arithmetic,nope"], "unknown reasoning_gym task 'nope'"),
    (["dataset='reasoning_gym:'"], "names no task"),
    (["dataset=reasoning_gym:leg_counting,leg_counting"], "names a task twice"),
    (["dataset=reasoning_gym:leg_counting", "dataset_options={basic_arithmetic: {}}"],
     "dataset_options: 'basic_arithmetic' is no reasoning_gym task"),
])
def test_bad_reasoning_gym_configs_name_the_problem(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_options_the_task_refuses_name_the_task() -> None:
    config = GRPOConfig(dataset="reasoning_gym:leg_counting",
                        dataset_options={"leg_counting": {"min_animals": 0}})
    with pytest.raises(ValueError, match="'leg_counting' refuses options"):
        load_datasets(config)


def test_rows_score_through_the_server(reward_client: RewardClient) -> None:
    """The row's columns are all the reasoning_gym verifier needs: its own answer scores 1, a
    wrong one 0, with the task's config (here not the library's default) sent along."""
    rows = gym_rows("reasoning_gym:basic_arithmetic,leg_counting", 2, 5, EASY)
    scorer = RewardScorer([GYM_REWARD], reward_client)
    try:
        right = scorer.score([str(r["answer"]) for r in rows], rows)
        wrong = scorer.score(["I do not know."] * len(rows), rows)
    finally:
        scorer.close()
    assert right.per_verifier["reasoning_gym"] == [1.0] * 4
    assert wrong.per_verifier["reasoning_gym"] == [0.0] * 4
