"""Asynchronous GRPO (``max_staleness``, trainer/ahead.py) on the tiny model and the real
engine: the next steps' rollouts are drawn while an update runs, no sample is older than
``max_staleness`` updates, the lag logged is the true one, and a run stops, saves and
resumes as the synchronous loop does."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from reward_server.client import RewardServerUnavailable
from tests.trainer.test_vllm_engine import _PROBE, _policy_logprobs, _trainer

pytestmark = pytest.mark.slow  # an engine process

_DEADLOCK_GUARD_S = 120  # only a broken implementation waits this long


def _counting_reward(calls: list[int], drawn_ahead: threading.Event, ahead_after: int
                     ) -> Any:
    def reward(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
        calls.append(len(texts))
        if len(calls) >= ahead_after:
            drawn_ahead.set()
        return [float(text.count("7") == 1) for text in texts]
    return reward


def test_the_next_batch_is_drawn_while_the_update_runs(tmp_path: Path, vllm_engine: Any
                                                        ) -> None:
    """Step 0's optimizer step waits until step 1's rollouts are scored: a loop that drew
    them only after the update would never get there. Step 1 then trains on samples one
    update old, and its engine log-probs are the older policy's, not the updated one's."""
    calls: list[int] = []
    drawn_ahead = threading.Event()
    trainer = _trainer(tmp_path, vllm_engine, max_staleness=1, max_steps=3,
                       learning_rate=3e-2, vllm_importance_sampling_correction=False)
    # 2 reward calls a step (4 prompts, 2 per call): the 4th is step 1's last
    trainer.scorer.fn = _counting_reward(calls, drawn_ahead, ahead_after=4)  # type: ignore[attr-defined]
    waited: list[bool] = []

    def after_the_next_batch(*_: Any) -> None:
        if not waited:
            waited.append(drawn_ahead.wait(_DEADLOCK_GUARD_S))

    trainer.optimizer.register_step_pre_hook(after_the_next_batch)
    history = trainer.train()
    assert waited == [True]
    lags = [h["sampling/staleness"] for h in history]
    assert lags[0] == 0 and lags[1] == 1 and all(0 <= lag <= 1 for lag in lags), lags
    gaps = [h["sampling/sampling_logp_difference/mean"] for h in history]
    assert gaps[0] < 1e-4, gaps  # drawn by the policy it trains
    assert gaps[1] > 1e-3, gaps  # drawn by the policy before step 0's update
    for lag, gap in zip(lags[2:], gaps[2:], strict=True):
        assert (gap < 1e-4) == (lag == 0), (lags, gaps)
    # once the run ends, the engine holds the trained policy's weights
    engine = torch.tensor(vllm_engine.prompt_logprobs(_PROBE))
    assert torch.allclose(engine, _policy_logprobs(trainer.policy), atol=1e-4)


def test_the_stale_samples_are_weighted_by_the_importance_ratio(tmp_path: Path,
                                                                vllm_engine: Any) -> None:
    trainer = _trainer(tmp_path, vllm_engine, max_staleness=2, max_steps=5,
                       learning_rate=3e-2, vllm_importance_sampling_mode="token_truncate",
                       vllm_importance_sampling_clip_max=1.5)
    history = trainer.train()
    assert all(h["sampling/staleness"] <= 2 for h in history)
    for h in history:
        assert h["sampling/importance_sampling_ratio/max"] <= 1.5 + 1e-6
        if h["sampling/staleness"] == 0:
            assert h["sampling/importance_sampling_ratio/mean"] == pytest.approx(1.0, abs=1e-3)


def test_a_checkpoint_holds_the_trained_steps_prompt_position(tmp_path: Path,
                                                              vllm_engine: Any) -> None:
    """Drawing ahead, the prompt stream is past the steps trained; a checkpoint records
    where the trained steps end, so a resume draws the rest again."""
    trainer = _trainer(tmp_path, vllm_engine, max_staleness=2, max_steps=4, save_every=2)
    trainer.train()
    state = torch.load(tmp_path / "run" / "checkpoint-000002" / "rank0.pt", weights_only=False)
    assert state["data"]["position"] == 2 * 4  # two steps of 4 prompts
    resumed = _trainer(tmp_path, vllm_engine, max_staleness=2, max_steps=4)
    resumed.resume(tmp_path / "run" / "checkpoint-000002")
    assert resumed.stream.position == 8 and resumed.step == 2
    assert len(resumed.train()) == 2


def test_a_reward_outage_while_drawing_ahead_stops_the_run_with_a_checkpoint(
        tmp_path: Path, vllm_engine: Any) -> None:
    calls: list[int] = []

    def reward(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
        calls.append(len(texts))
        if len(calls) > 4:  # step 2's batch
            raise RewardServerUnavailable("the reward server is down")
        return [0.5] * len(texts)

    trainer = _trainer(tmp_path, vllm_engine, max_staleness=1, max_steps=4)
    trainer.scorer.fn = reward  # type: ignore[attr-defined]
    with pytest.raises(RewardServerUnavailable):
        trainer.train()
    assert trainer.step == 2
    state = torch.load(tmp_path / "run" / "checkpoint-000002" / "rank0.pt", weights_only=False)
    assert state["data"]["position"] == 2 * 4


def test_max_staleness_0_is_the_synchronous_loop(tmp_path: Path, vllm_engine: Any) -> None:
    """No thread draws; and a run's draws follow from its seed, bit for bit."""
    runs = []
    for k in range(2):
        trainer = _trainer(tmp_path / str(k), vllm_engine, max_staleness=0, max_steps=3,
                           learning_rate=3e-2)
        history = trainer.train()
        assert trainer.ahead is None
        assert all(h["sampling/staleness"] == 0 for h in history)
        runs.append(([h["reward"] for h in history], _policy_logprobs(trainer.policy)))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])


def test_a_bfloat16_engine_trains_with_its_mismatch_weighted(tmp_path: Path,
                                                            vllm_engine: Any) -> None:
    """``vllm_dtype: bfloat16`` (an engine of its own, started by the trainer): its
    log-probs differ from the float32 policy's by far more than a float32 engine's, and the
    importance weights that correct it stay finite and near 1. (``vllm_engine``: only to
    skip where vLLM is not installed.)"""
    trainer = _trainer(tmp_path, None, vllm_dtype="bfloat16", max_steps=3,
                       vllm_kv_cache_gb=1, max_prompt_length=64)
    history = trainer.train()
    for h in history:
        assert h["sampling/sampling_logp_difference/mean"] > 1e-4, h  # float32: < 1e-6
        assert 0.5 < h["sampling/importance_sampling_ratio/mean"] < 1.5, h
        assert torch.isfinite(torch.tensor(h["loss"]))
