"""A run interrupted (Ctrl-C) while it waits for a step's rewards saves the last finished
step on its way out; --resume from that checkpoint continues exactly as the uninterrupted
run did. The checkpoint held torch's RNG state after the interrupted step's draw (HF
``generate`` had moved it), so the resumed run drew other samples."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.conftest import seven_rows
from trainer.config import GRPOConfig
from trainer.models import load_model
from trainer.rewards import FunctionScorer, ScoredBatch
from trainer.train import GRPOTrainer, seed_everything


def _sevens(texts: list[str], rows: list[dict[str, Any]]) -> list[float | None]:
    return [float(t.strip().endswith("7")) for t in texts]


class _InterruptedAt(FunctionScorer):
    """Scores locally; the reward wait of sampled draw number ``at`` is where Ctrl-C lands
    (the main thread waits on the future there)."""

    def __init__(self, at: int | None) -> None:
        super().__init__(_sevens)
        self.at, self.calls = at, 0

    def submit(self, texts: list[str], rows: list[dict[str, Any]], group_size: int = 1,
               truncated: list[bool] | None = None) -> Future[ScoredBatch]:
        self.calls += 1
        if self.at is not None and self.calls == self.at:
            class _Interrupted(Future):  # type: ignore[type-arg]
                def result(self, timeout: float | None = None) -> ScoredBatch:
                    raise KeyboardInterrupt
            return _Interrupted()
        return super().submit(texts, rows, group_size, truncated)


def _trainer(out: Path, scorer: FunctionScorer, **overrides: Any) -> GRPOTrainer:
    options: dict[str, Any] = dict(
        model="tiny", dataset="unused", output_dir=str(out), max_steps=4, prompts_per_step=4,
        num_generations=8, generation_chunk=4, max_completion_length=6, learning_rate=3e-3,
        micro_batch_size=32, progress_bar=False, save_every=0)
    options.update(overrides)
    config = GRPOConfig(**options)
    seed_everything(config.seed)
    model, tokenizer = load_model("tiny", torch.float32, config.seed)
    return GRPOTrainer(model, tokenizer, seven_rows(), config, None, scorer=scorer)


@pytest.mark.timeout(300)
def test_resume_after_ctrl_c_in_a_reward_wait_continues_exactly(tmp_path: Path) -> None:
    straight = _trainer(tmp_path / "a", _InterruptedAt(None))
    straight.train()
    # generation_chunk = prompts_per_step: one reward call per step; the third is step 3's
    first = _trainer(tmp_path / "b", _InterruptedAt(3))
    with pytest.raises(KeyboardInterrupt):
        first.train()
    checkpoint = tmp_path / "b" / "checkpoint-000002"
    assert checkpoint.is_dir()  # saved on the way out: step 2 had finished
    resumed = _trainer(tmp_path / "b", _InterruptedAt(None))
    resumed.resume(checkpoint)
    resumed.train()
    for p, q in zip(straight.policy.parameters(), resumed.policy.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.timeout(300)
def test_resume_between_steps_continues_exactly_too_after_a_finished_run_continues_exactly(tmp_path: Path) -> None:
    """The same harness without the interrupt: a checkpoint taken between steps."""
    straight = _trainer(tmp_path / "a", _InterruptedAt(None))
    straight.train()
    _trainer(tmp_path / "b", _InterruptedAt(None), max_steps=2).train()
    resumed = _trainer(tmp_path / "b", _InterruptedAt(None))
    resumed.resume(tmp_path / "b" / "checkpoint-000002")
    resumed.train()
    for p, q in zip(straight.policy.parameters(), resumed.policy.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.timeout(300)
def test_sigterm_in_an_update_waits_for_its_end_and_that_step_is_saved(tmp_path: Path) -> None:
    """One rank, SIGTERM in step 2's update (drawing ahead, most of a step): it stopped
    the update half-way, and with the policy half-updated nothing newer than step 1 could
    be saved. It now waits for the update's end, and step 2 is saved."""
    import signal

    from trainer import interrupt
    from trainer.checkpoint import latest_checkpoint

    trainer = _trainer(tmp_path, _InterruptedAt(None))
    update = trainer.accumulate_gradients

    def sigterm_in_step_2(*args: Any, **kwargs: Any) -> Any:
        out = update(*args, **kwargs)
        if trainer.step == 1:  # step 2's update, its gradients taken, the optimizer not yet
            signal.raise_signal(signal.SIGTERM)
        return out

    trainer.accumulate_gradients = sigterm_in_step_2  # type: ignore[method-assign]
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        restore = interrupt.sigterm_as_interrupt()
        try:
            with pytest.raises(interrupt.Terminated):
                trainer.train()
        finally:
            restore()
    finally:
        signal.signal(signal.SIGTERM, before)
    assert trainer.step == 2
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-000002"
