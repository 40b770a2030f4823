"""The GRPO loop on a tiny model built in code, against the real reward server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from reward_server.client import RewardClient, RewardServerUnavailable
from tests.conftest import free_port
from tests.trainer.conftest import seven_rows
from trainer.config import GRPOConfig, RewardSpec
from trainer.engine.client import EngineError, Sample
from trainer.models import load_model, tiny_model, tiny_tokenizer
from trainer.rewards import FunctionScorer
from trainer.train import GRPOTrainer, seed_everything


def make_trainer(tmp_path: Path, client: RewardClient, **overrides: Any) -> GRPOTrainer:
    options: dict[str, Any] = dict(
        model="tiny", dataset="unused", output_dir=str(tmp_path / "run"), max_steps=25,
        prompts_per_step=4, num_generations=8, generation_chunk=2, max_completion_length=6,
        learning_rate=3e-3, micro_batch_size=32, progress_bar=False,
        # the tiny model never stops (no EOS in 6 tokens): the task pays a cut text's last token
        rewards=[RewardSpec(verifier="math", params={"extract": "last_number", "truncated": False})])
    options.update(overrides)
    config = GRPOConfig(**options)
    seed_everything(config.seed)
    model, tokenizer = load_model("tiny", torch.float32, config.seed)
    return GRPOTrainer(model, tokenizer, seven_rows(), config, client,
                       eval_rows=seven_rows(16, seed=1))


def test_reward_rises_on_a_learnable_task(tmp_path: Path, reward_client: RewardClient) -> None:
    # "77" is the number 77 (the tiny tokenizer decodes without spaces): the 7 must stand alone
    # 4e-3: at 5e-3 the policy collapses at the last step, since a 7 with text after it
    # stopped counting as the committed answer (0.72 at step 23, 0.06 at step 25)
    trainer = make_trainer(tmp_path, reward_client, learning_rate=4e-3)
    history = trainer.train()
    rewards = [h["reward"] for h in history]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert first < 0.2 and last > 0.4, rewards  # measured: 0.04 -> 0.51
    assert history[-1]["eval/accuracy"] > history[0]["reward"]
    run = tmp_path / "run"
    assert (run / "metrics.jsonl").exists() and (run / "curves.png").exists()
    assert (run / "checkpoint-000025" / "model.safetensors").exists()


def test_metrics_names(tmp_path: Path, reward_client: RewardClient) -> None:
    trainer = make_trainer(tmp_path, reward_client, max_steps=1)
    metrics = trainer.training_step()
    for key in ["reward", "reward_std", "accuracy", "advantages/mean", "advantages/std",
                "frac_reward_zero_std", "completion_length", "completion_length_max",
                "truncated_fraction", "tokens_per_s", "time/generate", "time/reward_wait",
                "time/train", "reward_wait_share", "learning_rate", "clip_ratio/low_mean",
                "clip_ratio/high_mean", "clip_ratio/region_mean", "ratio_mean",
                "rewards/math/mean", "rewards/math/std", "rewards/math/unscorable_rate"]:
        assert key in metrics, key
    assert "kl" not in metrics  # beta = 0: no reference model, no KL
    assert trainer.ref_model is None


@pytest.mark.parametrize(
    "variant",
    [
        {"loss_type": "grpo", "beta": 0.04, "num_iterations": 2},
        {"loss_type": "bnpo", "scale_rewards": "batch", "micro_batch_size": 8},
        {"loss_type": "dr_grpo", "scale_rewards": "none", "mask_truncated_completions": True},
        {"loss_type": "dapo", "epsilon_high": 0.28, "dynamic_sampling": True},
        {"importance_sampling_level": "sequence", "num_iterations": 2, "lr_scheduler": "cosine",
         "warmup_steps": 1},
        {"gradient_checkpointing": True, "micro_batch_size": 16},
    ],
    ids=["grpo-kl-mu2", "bnpo-batch", "dr_grpo", "dapo-dynamic", "gspo", "checkpointing"],
)
def test_variants_run(tmp_path: Path, reward_client: RewardClient, variant: dict) -> None:
    trainer = make_trainer(tmp_path, reward_client, max_steps=3, **variant)
    history = trainer.train()
    assert len(history) == 3
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in history)
    if variant.get("beta"):
        assert trainer.ref_model is not None and "kl" in history[-1]
    if variant.get("num_iterations", 1) > 1:
        assert history[-1]["ratio_mean"] != 1.0 or history[-1]["loss"] != 0.0


def test_failed_reward_calls_stop_the_run_loudly(tmp_path: Path) -> None:
    dead = RewardClient(f"http://127.0.0.1:{free_port()}", max_attempts=2, backoff_s=0.01)
    trainer = make_trainer(tmp_path, dead, max_steps=2)
    before = [p.detach().clone() for p in trainer.policy.parameters()]
    with pytest.raises(RewardServerUnavailable):
        trainer.train()
    after = list(trainer.policy.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))  # no update


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])  # 0.1: two groups of AdamW's state
def test_resume_continues_exactly(tmp_path: Path, reward_client: RewardClient,
                                  weight_decay: float) -> None:
    straight = make_trainer(tmp_path / "a", reward_client, max_steps=4,
                            weight_decay=weight_decay)
    straight.train()
    first = make_trainer(tmp_path / "b", reward_client, max_steps=2, weight_decay=weight_decay)
    first.train()
    resumed = make_trainer(tmp_path / "b", reward_client, max_steps=4,
                           weight_decay=weight_decay)
    resumed.resume(tmp_path / "b" / "run" / "checkpoint-000002")
    assert resumed.step == 2 and resumed.stream.position == first.stream.position
    resumed.train()
    for p, q in zip(straight.policy.parameters(), resumed.policy.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


class _EngineFailingAtEvaluation:
    """A started engine (the VLLMEngine surface ColocatedEngine uses) whose process dies
    after its second sampled draw: the next greedy draw (an evaluation) fails."""

    weight_sync_s = 0.0

    def __init__(self) -> None:
        self.generator = torch.Generator().manual_seed(0)
        self.sampled = 0

    def load_weights(self, weights: Any) -> None:
        pass

    def generate(self, prompts: list[list[int]], n: int, max_tokens: Any,
                 stop_token_ids: list[int], greedy: bool = False, **_: Any
                 ) -> list[list[Sample]]:
        if greedy and self.sampled >= 2:
            raise EngineError("the vLLM engine process exited (-9); its log is above")
        self.sampled += not greedy
        return [[Sample(torch.randint(5, 20, (3,), generator=self.generator).tolist(),
                        [-1.0] * 3, "length") for _ in range(n)] for _ in prompts]

    def close(self, wait: bool = True) -> None:
        pass


def test_an_evaluation_that_fails_leaves_a_checkpoint_of_the_update_before_it(
        tmp_path: Path) -> None:
    """An engine (or reward server) that fails in the evaluation after step N's update:
    the run stops with a checkpoint of step N, as a failed step does, so the CLI's 'a
    checkpoint of step N' is true and --resume loses nothing."""
    config = GRPOConfig(
        model="tiny", dataset="unused", output_dir=str(tmp_path / "run"), max_steps=3,
        prompts_per_step=2, num_generations=2, generation_chunk=2, max_completion_length=3,
        micro_batch_size=8, progress_bar=False, rewards=[RewardSpec(verifier="local")],
        rollout_engine="vllm", eval_every=2, eval_samples=2)
    seed_everything(config.seed)
    tokenizer = tiny_tokenizer()
    rows = seven_rows()
    trainer = GRPOTrainer(tiny_model(tokenizer, config.seed, heads=2), tokenizer, rows, config,
                          None, eval_rows=rows[:2],
                          scorer=FunctionScorer(lambda texts, _: [0.0] * len(texts)),
                          engine=_EngineFailingAtEvaluation())  # type: ignore[arg-type]
    with pytest.raises(EngineError):
        trainer.train()
    assert trainer.step == 2  # step 2's update was made, then its evaluation failed
    assert (tmp_path / "run" / "checkpoint-000002").exists()


def _on_engine(engine: Any, tmp_path: Path, **options: Any) -> GRPOTrainer:
    """A tiny run sampling from a stand-in ``engine``, scored 0 throughout."""
    config = GRPOConfig(
        model="tiny", dataset="unused", output_dir=str(tmp_path / "run"), prompts_per_step=2,
        num_generations=2, generation_chunk=2, max_completion_length=3, micro_batch_size=8,
        progress_bar=False, rewards=[RewardSpec(verifier="local")], rollout_engine="vllm",
        **options)
    seed_everything(config.seed)
    tokenizer = tiny_tokenizer()
    return GRPOTrainer(tiny_model(tokenizer, config.seed, heads=2), tokenizer, seven_rows(),
                       config, None, scorer=FunctionScorer(lambda texts, _: [0.0] * len(texts)),
                       engine=engine)


class _EngineInterruptedAtDraw(_EngineFailingAtEvaluation):
    """Ctrl-C arrives while the engine makes its third sampled draw."""

    def load_staged(self, staged: Any) -> None:
        pass

    def generate(self, prompts: list[list[int]], n: int, max_tokens: Any,
                 stop_token_ids: list[int], greedy: bool = False, **kw: Any
                 ) -> list[list[Sample]]:
        if self.sampled == 2:
            raise KeyboardInterrupt
        return super().generate(prompts, n, max_tokens, stop_token_ids, greedy, **kw)


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_ctrl_c_saves_the_last_completed_step(tmp_path: Path, max_staleness: int) -> None:
    """Interrupted in the middle of a step's draw (drawing ahead, on the thread, which
    hands it to the trainer), the run leaves a checkpoint of the step before it (the
    policy is between two updates there), and the interrupt goes on up to the caller (the
    CLI's one line and exit code 130)."""
    trainer = _on_engine(_EngineInterruptedAtDraw(), tmp_path, max_steps=4,
                         max_staleness=max_staleness)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    done = trainer.step
    assert done >= 1 and (tmp_path / "run" / f"checkpoint-{done:06d}").is_dir()


class _EngineFailingToLoad(_EngineFailingAtEvaluation):
    """Every staged copy of the weights it is handed fails to load."""

    def load_staged(self, staged: Any) -> None:
        raise EngineError("vLLM engine: RuntimeError: load failed")


def test_a_finished_run_hands_the_engine_no_weights_as_it_closes(tmp_path: Path) -> None:
    """Drawing ahead, the weights published after the last step sample nothing: handing
    them over as the run closed turned a load failing there into a failed run whose every
    step had trained (and skipped the rest of its cleanup and its plot)."""
    trainer = _on_engine(_EngineFailingToLoad(), tmp_path, max_steps=2, max_staleness=2)
    trainer._owns_engine = True  # as grpo-train's: started by the trainer, closed with it
    assert len(trainer.train()) == 2
    assert (tmp_path / "run" / "checkpoint-000002").is_dir()


def test_an_engine_given_to_the_trainer_is_never_left_stale_silently(tmp_path: Path) -> None:
    """An engine given to the trainer outlives the run and is handed the trained policy as
    it closes; a load failing there is raised, after the last step's checkpoint."""
    trainer = _on_engine(_EngineFailingToLoad(), tmp_path, max_steps=2, max_staleness=2)
    with pytest.raises(EngineError, match="load failed"):
        trainer.train()
    assert (tmp_path / "run" / "checkpoint-000002").is_dir()
