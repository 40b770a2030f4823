"""Combining several verifiers' scores: a null (what the completion could not cause) moves no
advantage and erases nothing the other verifiers said. And what the trainer sends about a
completion the length limit cut: ``truncated``, so that an answer the cut ran into is never
paid."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from reward_server.client import RewardClient
from tests.helpers.held_rewards import held_rewards
from tests.trainer.conftest import seven_rows
from trainer.advantages import group_advantages
from trainer.config import GRPOConfig, RewardSpec
from trainer.models import load_model
from trainer.rewards import FunctionScorer, RewardScorer, ScoredBatch, combine_scores
from trainer.train import GRPOTrainer, seed_everything


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


# --- what the trainer sends about completions the length limit cut ------------------------

def test_a_cut_completion_carries_truncated_to_the_math_verifier_only() -> None:
    specs = [RewardSpec(verifier="math"), RewardSpec(verifier="code", columns={})]
    items = RewardScorer(specs, client=None).items(  # type: ignore[arg-type]
        ["cut", "whole"], [{"answer": "1"}, {"answer": "1"}], truncated=[True, False])
    assert [item.get("truncated") for item in items] == [True, None, None, None]
    assert "truncated" not in RewardScorer(specs, client=None).items(  # type: ignore[arg-type]
        ["a"], [{"answer": "1"}])[0]


def test_a_reward_spec_can_opt_out_of_sending_truncated() -> None:
    spec = RewardSpec(verifier="math", params={"truncated": False})
    items = RewardScorer([spec], client=None).items(  # type: ignore[arg-type]
        ["cut"], [{"answer": "1"}], truncated=[True])
    assert items[0]["truncated"] is False


def test_truncation_flags_must_match_the_completions() -> None:
    with pytest.raises(ValueError, match="2 truncation flags for 1"):
        RewardScorer([RewardSpec(verifier="math")], client=None).items(  # type: ignore[arg-type]
            ["a"], [{"answer": "1"}], truncated=[True, False])


# Completions cut by max_completion_length, as a small model writes them: the number at the
# cut is luck, a marked answer closed before the cut is not.
CUT = [
    ("48 + 24 = 72", True, 0.0),  # "72" may have been "720"
    ("Natalia sold 48 + 24 = 72 clips in", True, 0.0),
    ("<think>\nSo 48 + 24 = \\boxed{72}", True, 0.0),  # still thinking
    ("So the answer is \\boxed{72}. To double-check, 48", True, 1.0),
    ("She sold 72 clips.\n#### 72\nNext, consider the", True, 1.0),
    ("48 + 24 = 72", False, 1.0),  # the same text, ended by the model
]


def test_a_cut_off_answer_is_never_paid_through_the_server(reward_client: RewardClient) -> None:
    scorer = RewardScorer([RewardSpec(verifier="math")], reward_client)
    try:
        batch = scorer.score([t for t, _, _ in CUT], [{"answer": "72"}] * len(CUT),
                             truncated=[cut for _, cut, _ in CUT])
        unflagged = scorer.score([t for t, _, _ in CUT], [{"answer": "72"}] * len(CUT))
    finally:
        scorer.close()
    assert batch.per_verifier["math"] == [want for _, _, want in CUT]
    # without the flag, the text alone: the first line ends as a sentence may end
    assert unflagged.per_verifier["math"][0] == 1.0


class RecordingScorer(FunctionScorer):
    def __init__(self) -> None:
        super().__init__(lambda texts, rows: [0.0] * len(texts))
        self.truncated: list[bool] = []

    def score(self, texts: list[str], rows: list[dict[str, Any]], group_size: int = 1,
              truncated: list[bool] | None = None) -> ScoredBatch:
        assert truncated is not None and len(truncated) == len(texts)
        self.truncated += truncated
        return super().score(texts, rows, group_size, truncated)


def test_the_trainer_sends_each_completions_truncation(tmp_path: Path) -> None:
    """``Rollout.truncated`` (no EOS within max_completion_length) reaches the scorer, one
    flag per completion, in the completions' order."""
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path),
                        num_generations=4, max_completion_length=3, progress_bar=False,
                        device="cpu", prompts_per_step=2, generation_chunk=1)
    seed_everything(0)
    model, tokenizer = load_model("tiny", torch.float32, 0)
    scorer = RecordingScorer()
    trainer = GRPOTrainer(model, tokenizer, seven_rows(), config, None, scorer=scorer)
    rollout, *_ = trainer.sampler.sample(trainer.stream.take(2))
    scorer.close()
    assert scorer.truncated == rollout.truncated.tolist()
    assert len(scorer.truncated) == 8 and any(scorer.truncated)  # 3 tokens: most are cut


def _scorer_on(url: str) -> RewardScorer:
    client = RewardClient(url, timeout=600, max_attempts=None, retry_for_s=600)
    return RewardScorer([RewardSpec(verifier="math")], client)


def test_an_interrupted_scorers_close_ends_the_request_in_flight() -> None:
    """Ctrl-C's close (``wait=False``) neither waits for a reward request the server holds
    nor lets it be tried again: it fails at once on the client's side, before the server
    answers."""
    with held_rewards(hold=1) as server:
        scorer = _scorer_on(server.url)
        in_flight = scorer.submit(["7", "8"], [{"prompt": "p", "answer": "7"}] * 2)
        server.held.wait(60)
        scorer.close(wait=False)
        server.note("closed")
        failure = in_flight.exception(timeout=60)
        server.note(f"failed: {type(failure).__name__}")
        scorer.client.close()
        server.release.set()
        server.answered.wait(60)
    assert server.events == ["held", "closed", "failed: RewardServerUnavailable", "answered"]


def test_a_finished_scorers_close_waits_for_the_request_in_flight() -> None:
    """The end of a run that was not interrupted closes the scorer as before: the scoring
    in hand finishes, with its rewards."""
    with held_rewards(hold=1) as server:
        scorer = _scorer_on(server.url)
        in_flight = scorer.submit(["7", "8"], [{"prompt": "p", "answer": "7"}] * 2)
        server.held.wait(60)
        started = threading.Event()

        def close() -> None:
            server.note("closing")
            started.set()
            scorer.close()
            server.note("closed")

        closing = threading.Thread(target=close)
        closing.start()
        started.wait(60)
        server.release.set()
        closing.join(120)
        scorer.client.close()
    assert server.events == ["held", "closing", "answered", "closed"]
    assert in_flight.result().rewards == [0.0, 1.0]


def test_an_interrupted_function_scorer_does_not_wait_for_its_call() -> None:
    """A local reward function stuck in a call: ``close(wait=False)`` returns while it
    runs (nothing can end it), and drops the calls queued behind it."""
    started, release, events = threading.Event(), threading.Event(), []

    def stuck(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
        started.set()
        release.wait(60)
        events.append("answered")
        return [1.0] * len(texts)

    scorer = FunctionScorer(stuck)
    in_flight = scorer.submit(["a"], [{}])
    queued = scorer.submit(["b"], [{}])
    started.wait(60)
    scorer.close(wait=False)
    events.append("closed")
    release.set()
    assert in_flight.result(timeout=60).rewards == [1.0]
    assert events == ["closed", "answered"]
    assert queued.cancelled()


class OwnScorer:
    """A scorer of a user's own, written to the protocol before ``close`` took ``wait``."""

    def __init__(self) -> None:
        self.inner, self.closed = FunctionScorer(lambda texts, rows: [0.0] * len(texts)), 0

    def score(self, *args: Any, **kwargs: Any) -> ScoredBatch:
        return self.inner.score(*args, **kwargs)

    def submit(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.submit(*args, **kwargs)

    def close(self) -> None:
        self.closed += 1
        self.inner.close()


def test_an_interrupted_run_closes_a_scorer_whose_close_takes_no_wait(tmp_path: Path) -> None:
    """Interrupted, the trainer closes its scorer without waiting; a user's scorer whose
    ``close`` has no ``wait`` is closed its own way, not failed with a TypeError on Ctrl-C."""
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path),
                        num_generations=4, max_completion_length=3, progress_bar=False,
                        device="cpu", prompts_per_step=2, generation_chunk=1)
    model, tokenizer = load_model("tiny", torch.float32, 0)
    scorer = OwnScorer()
    trainer = GRPOTrainer(model, tokenizer, seven_rows(), config, None, scorer=scorer)
    trainer.interrupted()
    trainer.close()
    assert scorer.closed == 1
