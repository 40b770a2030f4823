"""Model preparation: the policy's own dropout is off in the update (``disable_dropout``), so
that π/π_old compares two forwards of the same function."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from tests.trainer.conftest import seven_rows
from trainer import train
from trainer.config import GRPOConfig
from trainer.models import tiny_tokenizer
from trainer.rewards import FunctionScorer
from trainer.train import GRPOTrainer, seed_everything

pytestmark = pytest.mark.slow  # trains tiny models: seconds a test


def dropout_model(kind: str, vocab: int) -> torch.nn.Module:
    """Llama drops attention weights through a float (``attention_dropout``, no module);
    GPT-2 through ``nn.Dropout`` modules (embeddings, attention, residuals)."""
    torch.manual_seed(0)
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, attention_dropout=0.3,
            pad_token_id=0))
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=128, resid_pdrop=0.3,
        embd_pdrop=0.3, attn_pdrop=0.3, pad_token_id=0, bos_token_id=2, eos_token_id=1))


def first_ratio(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch,
                **options: Any) -> torch.Tensor:
    """π/π_old of the completion tokens in the first micro-step of a step with μ = 2."""
    seen: list[torch.Tensor] = []

    def recording_loss(logps, old_logps, ref_logps, advantages, mask, **kwargs):
        if not seen:
            seen.append(torch.exp(logps.detach() - old_logps)[mask.bool()])
        return policy_loss(logps, old_logps, ref_logps, advantages, mask, **kwargs)

    policy_loss = train.policy_loss
    monkeypatch.setattr(train, "policy_loss", recording_loss)
    tokenizer = tiny_tokenizer()
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path), max_steps=1,
                        prompts_per_step=2, num_generations=4, max_completion_length=6,
                        num_iterations=2, micro_batch_size=8, progress_bar=False,
                        device="cpu", **options)
    seed_everything(0)
    trainer = GRPOTrainer(dropout_model(kind, len(tokenizer)), tokenizer, seven_rows(), config,
                          None, scorer=FunctionScorer(lambda texts, rows: [
                              float(len(t) % 2) for t in texts]))
    trainer.training_step()
    trainer.scorer.close()
    return seen[0]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_the_ratio_is_exactly_one_on_the_first_micro_step(tmp_path: Path, kind: str,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    ratio = first_ratio(tmp_path, kind, monkeypatch)
    assert ratio.numel() > 0
    assert torch.equal(ratio, torch.ones_like(ratio))


def test_with_the_models_dropout_kept_the_ratio_is_noise(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``disable_dropout: false`` gives (and every run gave before): a ratio that is not
    1 before any update, so clipping acts on dropout noise."""
    ratio = first_ratio(tmp_path, "gpt2", monkeypatch, disable_dropout=False)
    assert (ratio - 1).abs().max() > 0.05  # measured: 0.76 .. 1.31


def test_lora_dropout_stays_what_it_is_set_to(tmp_path: Path) -> None:
    """The model's own dropout goes; an adapter's ``lora_dropout`` is the user's choice."""
    tokenizer = tiny_tokenizer()
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path),
                        lora_r=4, lora_dropout=0.1, progress_bar=False, device="cpu")
    trainer = GRPOTrainer(dropout_model("llama", len(tokenizer)), tokenizer, seven_rows(),
                          config, None, scorer=FunctionScorer(lambda texts, rows: [0.0]))
    trainer.scorer.close()
    modules = dict(trainer.policy.named_modules())
    assert {m.p for name, m in modules.items() if name.endswith("lora_dropout.default")} == {0.1}
    assert {m.attention_dropout for m in modules.values()
            if hasattr(m, "attention_dropout")} == {0.0}


def test_a_conversion_another_process_finished_first_is_used(tmp_path: Path,
                                                              monkeypatch: Any) -> None:
    """Two processes converting SmolLM2 on a fresh machine (two ranks, a bench's two racers):
    the one that renames second finds the folder there and uses it."""
    import shutil

    from trainer import models

    monkeypatch.setattr(models, "CACHE_DIR", tmp_path)
    rename = Path.rename

    def the_other_process_lands_first(self: Path, target: Path) -> Path:
        shutil.copytree(self, target)
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", the_other_process_lands_first)
    path = models.smollm2_path()
    assert (path / "model.safetensors").exists()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no half copy left behind
    assert transformers.AutoConfig.from_pretrained(path).model_type == "llama"
