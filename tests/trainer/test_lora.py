"""LoRA through peft on the tiny model: only the adapter trains, the reference policy is the
base with the adapter off (no copy), checkpoints hold the adapter and resume, and ``--merge``
writes plain weights that compute what base + adapter compute."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.trainer.conftest import seven_rows
from trainer import checkpoint, cli
from trainer.config import GRPOConfig, load_config
from trainer.logprobs import completion_logps
from trainer.models import load_model
from trainer.rewards import FunctionScorer
from trainer.train import GRPOTrainer, UpdateBatch, seed_everything

pytestmark = pytest.mark.slow  # trains tiny models: seconds a test


def sevens(texts: list[str], rows: list[dict[str, Any]]) -> list[float]:
    """Graded, so that a random model's groups are not all alike (zero advantages)."""
    return [t.count("7") / max(len(t), 1) for t in texts]


def make_trainer(tmp_path: Path, **overrides: Any) -> GRPOTrainer:
    options: dict[str, Any] = dict(
        model="tiny", dataset="unused", output_dir=str(tmp_path / "run"), max_steps=2,
        prompts_per_step=2, num_generations=4, generation_chunk=2, max_completion_length=6,
        learning_rate=1e-2, micro_batch_size=8, progress_bar=False, lora_r=4, lora_alpha=8)
    options.update(overrides)
    config = GRPOConfig(**options)
    seed_everything(config.seed)
    model, tokenizer = load_model("tiny", torch.float32, config.seed)
    return GRPOTrainer(model, tokenizer, seven_rows(), config, None,
                       scorer=FunctionScorer(sevens))


def named(model: torch.nn.Module, lora: bool) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()
            if ("lora_" in n) == lora}


def test_lora_is_off_by_default() -> None:
    config = GRPOConfig(model="tiny", dataset="unused")
    assert config.lora_r == 0
    assert config.lora_target_modules == "all-linear"


def test_bad_lora_options_are_one_readable_line() -> None:
    with pytest.raises(ValueError, match="lora_r"):
        load_config(None, ["lora_r=-1"])
    with pytest.raises(ValueError, match="lora_dropout"):
        load_config(None, ["lora_dropout=1.5"])


def test_only_the_adapter_trains(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path)
    base, adapter = named(trainer.policy, False), named(trainer.policy, True)
    assert adapter, "no LoRA parameters"
    # every linear layer of the blocks carries an adapter, the embeddings and head do not
    assert any("q_proj.lora_A" in n for n in adapter) and any("down_proj" in n for n in adapter)
    assert not any("embed_tokens" in n for n in adapter)
    optimized = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert optimized == {id(p) for p in trainer.policy.parameters() if p.requires_grad}
    assert len(optimized) == len(adapter)
    for _ in range(2):
        trainer.training_step()
    trainer.scorer.close()
    after_base, after_adapter = named(trainer.policy, False), named(trainer.policy, True)
    assert all(torch.equal(base[n], after_base[n]) for n in base)
    assert any(not torch.equal(adapter[n], after_adapter[n]) for n in adapter)


def test_reference_is_the_base_without_a_copy(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, beta=0.1, learning_rate=5e-2)
    assert trainer.ref_model is None  # no second model in memory
    history = [trainer.training_step() for _ in range(3)]
    trainer.scorer.close()
    assert history[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # B = 0 at the start: π = π_ref
    assert history[-1]["kl"] > 1e-6  # the adapter moved the policy away from the base

    # the reference log-probs are those of the untouched starting model
    fresh, tokenizer = load_model("tiny", torch.float32, 0)
    tokenizer.padding_side = "left"
    enc = tokenizer(["say 7: abc=>7", "say 7: xy=>12"], return_tensors="pt", padding=True)
    ids, attn = enc.input_ids, enc.attention_mask
    with torch.no_grad():
        expected = completion_logps(fresh, ids, attn, 3, 1.0)
        got = trainer.reference_logps(UpdateBatch(ids, attn, 3, torch.ones(2, 3),
                                                  torch.zeros(2)))
        policy = completion_logps(trainer.policy, ids, attn, 3, 1.0)
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(policy, expected)


def test_checkpoint_holds_the_adapter_and_resumes(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path)
    trainer.train()
    saved = checkpoint.latest_checkpoint(tmp_path / "run")
    assert saved is not None
    assert (saved / "adapter_model.safetensors").exists()
    assert not (saved / "model.safetensors").exists()  # the base is not copied
    resumed = make_trainer(tmp_path, max_steps=3)
    resumed.resume(saved)
    assert resumed.step == 2
    trained = named(trainer.policy, True)
    assert all(torch.equal(trained[n], p) for n, p in named(resumed.policy, True).items())
    resumed.train()  # and it continues
    assert resumed.step == 3


def test_merge_writes_weights_equal_to_base_plus_adapter(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path)
    trainer.train()
    saved = checkpoint.latest_checkpoint(tmp_path / "run")
    out = tmp_path / "merged"
    assert cli.main(["--merge", str(saved), "--output", str(out)]) == 0
    merged = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    ids = torch.tensor([[5, 9, 12, 30, 7, 8]])
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, trainer.policy(ids).logits,
                                   atol=1e-5, rtol=1e-5)


def test_merge_of_a_full_checkpoint_is_one_readable_line(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    trainer = make_trainer(tmp_path, lora_r=0)
    trainer.train()
    saved = checkpoint.latest_checkpoint(tmp_path / "run")
    capsys.readouterr()  # the training's own output
    assert cli.main(["--merge", str(saved)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no LoRA adapter" in err[0]


def test_the_engines_weights_leave_the_frozen_base_as_it_was() -> None:
    """Each sync hands an engine W + BA·α/r; the base W stays bit for bit what it was after
    any number of syncs (a merge and an unmerge in place move it by rounding), and what the
    engine gets is what peft's own merge computes."""
    from trainer.engine.weights import policy_weights
    from trainer.lora import add_adapter
    from trainer.models import tiny_model, tiny_tokenizer

    policy = add_adapter(tiny_model(tiny_tokenizer(), 3, heads=2), 8, 16.0, 0.0,
                         "all-linear")
    with torch.no_grad():  # a trained adapter: B starts at zero, which adds exactly nothing
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    base = {n: t.clone() for n, t in policy.state_dict().items() if "lora_" not in n}
    for _ in range(20):
        with policy_weights(policy) as weights:
            pass
    assert all(torch.equal(t, base[n]) for n, t in policy.state_dict().items()
               if "lora_" not in n)
    merged = policy.merge_and_unload().state_dict()
    # the tied head is the embedding's weight: the engine gets it once, and ties it itself
    assert weights.keys() == merged.keys() - {"lm_head.weight"}
    adapted = [n for n in weights if not torch.equal(weights[n], base.get(
        f"base_model.model.{n.replace('.weight', '.base_layer.weight')}", weights[n]))]
    assert adapted  # the adapter's layers were merged in
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, merged[name], rtol=0, atol=1e-6)
