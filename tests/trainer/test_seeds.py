"""The engine's seeds (trainer/seeds.py): each step's draws follow from the run's seed and
the step alone, whatever the update draws from torch's generator, however drawing ahead's
thread and the update interleave, and across a resume. The trainer runs on the tiny model
with a stand-in engine that records the seeds it is sent (no engine process)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.conftest import seven_rows
from trainer.config import GRPOConfig, RewardSpec
from trainer.engine.client import Sample
from trainer.engine.sampling import generate_on_engine
from trainer.models import tiny_model, tiny_tokenizer
from trainer.rewards import FunctionScorer
from trainer.rollout import Prompt, Sampling
from trainer.seeds import SEED_LIMIT, DrawSeeds, derive_seed
from trainer.train import GRPOTrainer, seed_everything

pytestmark = pytest.mark.timeout(120)  # a broken interleaving waits for ever: end it sooner

_WAIT_S = 60  # only a broken hand-over waits this long


class _SeedRecorder:
    """A started engine (the VLLMEngine surface ColocatedEngine uses) that records the seed
    of each sampled draw, and draws tokens that follow from it. ``before_draw``: called
    with the number of sampled draws made so far, before the next."""

    weight_sync_s = 0.0

    def __init__(self, before_draw: Any = None) -> None:
        self.seeds: list[int | None] = []  # the sampled draws'
        self.sent: list[int | None] = []  # every draw's, greedy ones too
        self.before_draw = before_draw or (lambda drawn: None)

    def load_weights(self, weights: Any) -> None:
        pass

    def load_staged(self, staged: Any) -> None:
        pass

    def generate(self, prompts: list[list[int]], n: int, max_tokens: Any,
                 stop_token_ids: list[int], greedy: bool = False, seed: int | None = None,
                 **_: Any) -> list[list[Sample]]:
        self.sent.append(seed)
        if not greedy:
            self.before_draw(len(self.seeds))
            self.seeds.append(seed)
        generator = torch.Generator().manual_seed(seed or 0)
        return [[Sample(torch.randint(5, 20, (3,), generator=generator).tolist(), [-1.0] * 3,
                        "length") for _ in range(n)] for _ in prompts]

    def close(self) -> None:
        pass


def _trainer(tmp_path: Path, engine: _SeedRecorder, **overrides: Any) -> GRPOTrainer:
    options: dict[str, Any] = dict(
        model="tiny", dataset="unused", output_dir=str(tmp_path / "run"), max_steps=4,
        prompts_per_step=2, num_generations=2, generation_chunk=2, max_completion_length=3,
        micro_batch_size=8, progress_bar=False, rewards=[RewardSpec(verifier="local")],
        rollout_engine="vllm", save_every=2)
    options.update(overrides)
    config = GRPOConfig(**options)
    seed_everything(config.seed)
    tokenizer = tiny_tokenizer()
    return GRPOTrainer(tiny_model(tokenizer, config.seed, heads=2), tokenizer, seven_rows(),
                       config, None, scorer=FunctionScorer(lambda texts, _: [0.0] * len(texts)),
                       engine=engine)  # type: ignore[arg-type]


class _Interleaving:
    """The update draws from torch's generator (as dropout does) at each optimizer step, in
    an order forced against the drawing thread: ``draws_first``: the update of step k waits
    until step k + 1's batch is being drawn; else step k + 1's draw waits until the update
    of step k has drawn its random numbers (the synchronous loop's order)."""

    def __init__(self, draws_first: bool, max_steps: int, start: int = 0) -> None:
        self.draws_first, self.max_steps, self.start = draws_first, max_steps, start
        self.updated = 0  # updates that drew their random numbers
        self.drawn = 0  # sampled draws begun
        self.changed = threading.Condition()

    def before_draw(self, drawn: int) -> None:
        with self.changed:
            if not self.draws_first and drawn > 0:
                assert self.changed.wait_for(lambda: self.updated >= drawn, _WAIT_S)
            self.drawn = drawn + 1
            self.changed.notify_all()

    def update(self, *_: Any) -> None:
        with self.changed:
            step = self.start + self.updated
            if self.draws_first and step + 1 < self.max_steps:
                assert self.changed.wait_for(lambda: self.drawn >= self.updated + 2, _WAIT_S)
            torch.rand(1000)  # what dropout would draw
            self.updated += 1
            self.changed.notify_all()


def _run(tmp_path: Path, max_staleness: int, draws_first: bool, max_steps: int = 4,
         resume: Path | None = None) -> list[int | None]:
    """The seeds the engine was sent, a draw per step, in step order; ``resume``: from
    that checkpoint."""
    start = int(resume.name.removeprefix("checkpoint-")) if resume else 0
    order = _Interleaving(draws_first, max_steps, start)
    engine = _SeedRecorder(order.before_draw)
    trainer = _trainer(tmp_path, engine, max_staleness=max_staleness, max_steps=max_steps)
    if resume:
        trainer.resume(resume)
    trainer.optimizer.register_step_pre_hook(order.update)
    trainer.train()
    return engine.seeds


def test_a_draws_seed_is_a_function_of_run_seed_rank_step_and_draw() -> None:
    seeds = DrawSeeds(seed=7, rank=0, step=3)
    first = [seeds.next() for _ in range(3)]
    assert first == [derive_seed(7, 0, 3, k) for k in range(3)]
    torch.rand(100)  # torch's generator plays no part
    assert [DrawSeeds(7, 0, 3).next() for _ in range(2)] == [first[0]] * 2
    others = {derive_seed(7, 1, 3, 0), derive_seed(7, 0, 4, 0), derive_seed(8, 0, 3, 0),
              derive_seed(-7, 0, 3, 0)}
    assert len(others | set(first)) == 7  # another rank, step, draw or run: another seed
    assert all(0 <= s < SEED_LIMIT for s in others | set(first))


def test_a_greedy_draw_takes_no_seed_and_a_sampled_one_the_steps_next() -> None:
    """An evaluation's greedy draw sends no seed and takes none of the step's, so how often
    a run evaluates changes nothing it trains on; a sampled draw without the step's seeds
    is refused rather than seeded from anywhere else."""
    engine, tokenizer = _SeedRecorder(), tiny_tokenizer()
    rows = [{"prompt": "say 7"}]
    args = (engine, tokenizer, rows, [Prompt("say 7", False)], Sampling(2, 16, 3), [0])
    seeds = DrawSeeds(0, 0, 5)
    generate_on_engine(*args, greedy=True, seeds=seeds)  # type: ignore[arg-type]
    generate_on_engine(*args, seeds=seeds)  # type: ignore[arg-type]
    assert engine.sent == [None, derive_seed(0, 0, 5, 0)] and seeds.drawn == 1
    with pytest.raises(ValueError, match="seeds"):
        generate_on_engine(*args)  # type: ignore[arg-type]


def test_the_synchronous_loops_seeds_ignore_what_the_update_draws(tmp_path: Path) -> None:
    """Dropout drawing from torch's generator in every update does not move the seeds the
    steps after it draw with."""
    quiet = _trainer(tmp_path / "quiet", _SeedRecorder())
    quiet.train()
    drawing = _run(tmp_path / "drawing", max_staleness=0, draws_first=False)
    assert quiet.engine is not None
    assert drawing == quiet.engine.engine.seeds  # type: ignore[attr-defined]
    assert len(set(drawing)) == 4


@pytest.mark.parametrize("draws_first", [False, True])
def test_drawing_ahead_draws_the_synchronous_loops_seeds(tmp_path: Path,
                                                        draws_first: bool) -> None:
    """Step k + 1's batch drawn before or after the update of step k draws its random
    numbers: the seeds are the synchronous loop's either way."""
    synchronous = _run(tmp_path / "sync", max_staleness=0, draws_first=False)
    ahead = _run(tmp_path / "ahead", max_staleness=1, draws_first=draws_first)
    assert ahead == synchronous


def test_a_resumed_run_drawing_ahead_draws_what_the_uninterrupted_run_drew(
        tmp_path: Path) -> None:
    """The checkpoint of step 2 is written after step 2's batch (and maybe step 3's) was
    drawn ahead: a run resumed from it draws steps 2 and 3 with the seeds the uninterrupted
    run drew them with."""
    straight = _run(tmp_path / "straight", max_staleness=1, draws_first=True)
    resumed = _run(tmp_path / "resumed", max_staleness=1, draws_first=True,
                   resume=tmp_path / "straight" / "run" / "checkpoint-000002")
    assert len(straight) == 4 and resumed == straight[2:]
