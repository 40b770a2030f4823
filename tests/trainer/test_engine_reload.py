"""A weight sync the engine took only in part stops the run: vLLM's ``reload_weights``
logs a weight it skipped and goes on sampling from the old one. The real engine, on the
tiny model (tied head, packed ``qkv_proj``/``gate_up_proj``), is handed staged files with a
bad name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.conftest import seven_rows
from trainer.config import GRPOConfig, RewardSpec
from trainer.engine import colocated
from trainer.engine.client import EngineError, StagedWeights
from trainer.engine.weights import policy_weights
from trainer.models import tiny_model, tiny_tokenizer
from trainer.rewards import FunctionScorer
from trainer.train import GRPOTrainer, seed_everything

pytestmark = pytest.mark.slow  # an engine process

_PROBE = [2, 5, 6, 7, 8, 9, 10, 11, 12, 13]


def _weights(seed: int = 0) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    model = tiny_model(tiny_tokenizer(), seed=seed, heads=2)
    with policy_weights(model) as weights:
        return model, dict(weights)


@torch.no_grad()
def _policy_logprobs(policy: torch.nn.Module) -> torch.Tensor:
    ids = torch.tensor([_PROBE])
    logps = torch.log_softmax(policy(ids).logits[0, :-1].float(), -1)
    return logps.gather(1, ids[0, 1:, None])[:, 0]


def _load(engine: Any, weights: dict[str, torch.Tensor]) -> None:
    with StagedWeights(weights) as staged:
        engine.load_staged(staged)


def test_the_policys_own_weights_load_whole(vllm_engine: Any) -> None:
    """Every staged name is taken and every engine parameter written: the tied head has
    no name of its own in the file, q/k/v and gate/up go into packed parameters."""
    model, weights = _weights(seed=3)
    assert "lm_head.weight" not in weights and "model.layers.0.self_attn.q_proj.weight" in weights
    _load(vllm_engine, weights)
    engine = torch.tensor(vllm_engine.prompt_logprobs(_PROBE))
    assert torch.allclose(engine, _policy_logprobs(model), atol=1e-4)


def test_a_weight_under_a_name_the_engine_skips_is_an_error(vllm_engine: Any) -> None:
    """vLLM ignores any name ending in ``.bias`` its model lacks: a weight renamed so
    was skipped, its parameter kept the old value, and the load answered as if whole."""
    _, old = _weights(seed=1)
    _load(vllm_engine, old)
    model, weights = _weights(seed=2)
    weights["model.layers.1.mlp.down_proj.bias"] = weights.pop(
        "model.layers.1.mlp.down_proj.weight")
    with pytest.raises(EngineError) as caught:
        _load(vllm_engine, weights)
    message = str(caught.value)
    assert "model.layers.1.mlp.down_proj.bias" in message  # the staged name not taken
    assert "model.layers.1.mlp.down_proj.weight" in message  # the parameter left as it was
    assert caught.value.not_loaded == ["model.layers.1.mlp.down_proj.bias"]  # type: ignore[attr-defined]
    assert caught.value.not_updated == ["model.layers.1.mlp.down_proj.weight"]  # type: ignore[attr-defined]
    assert "\n" not in message
    # the engine is left usable: whole weights load over it
    _load(vllm_engine, _weights(seed=2)[1])
    engine = torch.tensor(vllm_engine.prompt_logprobs(_PROBE))
    assert torch.allclose(engine, _policy_logprobs(model), atol=1e-4)


def test_a_packed_parameter_given_some_of_its_shards_is_an_error(vllm_engine: Any) -> None:
    """No ``q_proj`` for layer 0: its ``qkv_proj`` took k and v, and nothing named in the
    file went unused; the parameter is named with the shards it took."""
    _, weights = _weights(seed=4)
    del weights["model.layers.0.self_attn.q_proj.weight"]
    with pytest.raises(EngineError, match=r"model\.layers\.0\.self_attn\.qkv_proj\.weight "
                                          r"\(shards k, v of 3\)") as caught:
        _load(vllm_engine, weights)
    assert caught.value.not_loaded == []  # type: ignore[attr-defined]
    _load(vllm_engine, _weights(seed=4)[1])


def _misnaming_from_the_second_copy() -> Any:
    """``policy_weights`` whose second and later copies carry ``model.norm.weight`` under a
    name the engine skips (the first is the one a given engine is synced with at start)."""
    original, calls = colocated.policy_weights, []

    @contextmanager
    def renamed(policy: torch.nn.Module) -> Iterator[dict[str, torch.Tensor]]:
        with original(policy) as weights:
            calls.append(1)
            weights = dict(weights)
            if len(calls) > 1:
                weights["model.norm.bias"] = weights.pop("model.norm.weight")
            yield weights

    return renamed


def test_a_run_whose_sync_the_engine_took_in_part_stops_with_a_checkpoint(
        tmp_path: Path, vllm_engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 1's update is handed to the engine with one weight misnamed: the run stops
    there (the CLI's one line: ``stopped at step 1: the vLLM engine took 19 of the 20
    weights it was sent, not model.norm.bias; ...``) with a checkpoint of step 1, rather
    than drawing step 2 from an engine still on step 0's norm."""
    monkeypatch.setattr(colocated, "policy_weights", _misnaming_from_the_second_copy())
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path / "run"),
                        max_steps=3, prompts_per_step=2, num_generations=4,
                        max_completion_length=4, micro_batch_size=8, progress_bar=False,
                        rewards=[RewardSpec(verifier="local")], rollout_engine="vllm")
    seed_everything(config.seed)
    tokenizer = tiny_tokenizer()
    trainer = GRPOTrainer(tiny_model(tokenizer, config.seed, heads=2), tokenizer,
                          seven_rows(), config, None,
                          scorer=FunctionScorer(lambda texts, rows: [1.0] * len(texts)),
                          engine=vllm_engine)
    with pytest.raises(EngineError, match=r"took 19 of the 20 weights it was sent, not "
                                          r"model\.norm\.bias; and left 1 of its "
                                          r"parameters as they were: model\.norm\.weight"):
        trainer.train()
    assert trainer.step == 1
    assert (tmp_path / "run" / "checkpoint-000001" / "model.safetensors").exists()
    _load(vllm_engine, _weights()[1])


def test_a_start_whose_weights_the_engine_took_in_part_is_an_error(
        vllm_engine: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """vLLM's start skips a weight its model has no parameter for under a suffix it
    ignores: a policy with a bias the engine's model lacks started an engine that drew
    step 1 without it. The start now checks the load, and says which weight it did not
    take before anything is drawn. (``vllm_engine``: only to skip without vLLM.)"""
    from trainer.engine import client
    from trainer.engine.client import EngineSettings, VLLMEngine, WeightsNotLoaded

    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(client, "_SHARED_MEMORY", shm)
    model, weights = _weights(seed=3)
    weights["model.layers.0.mlp.down_proj.bias"] = torch.zeros(
        weights["model.layers.0.mlp.down_proj.weight"].shape[0])
    with pytest.raises(WeightsNotLoaded) as caught:
        VLLMEngine(model, EngineSettings(max_model_len=64, max_num_seqs=4, kv_cache_gb=1),
                   weights)
    assert caught.value.not_loaded == ["model.layers.0.mlp.down_proj.bias"]
    assert caught.value.not_updated == []
    assert list(shm.iterdir()) == []  # the engine ended, its files gone
