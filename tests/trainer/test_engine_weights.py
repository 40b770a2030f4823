"""What the engine is given of the policy's weights (trainer/engine/weights.py, and
``client._contiguous``, which writes them): every weight once, ties left to the engine,
and an adapter it cannot hold refused before the run."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from trainer import lora
from trainer.engine import client
from trainer.engine.client import EngineError
from trainer.engine.weights import check_adapters_syncable, policy_weights
from trainer.models import tiny_model, tiny_tokenizer


class _Gathered(torch.Tensor):
    """A gathered CUDA tensor as the caching allocator hands it out: ``to("cpu")`` copies,
    and once the copy is made its block serves the next gather of the same size."""

    def to(self, *args: Any, **kwargs: Any) -> torch.Tensor:  # type: ignore[override]
        return torch.Tensor(self).clone()


class _Sharded:
    """FSDP2's DTensor as ``_contiguous`` uses it: ``full_tensor`` all-gathers into a fresh
    allocation (here the pool's block for that size, as the allocator reuses a freed one)."""

    pool: dict[tuple[int, ...], torch.Tensor] = {}

    def __init__(self, value: torch.Tensor) -> None:
        self.value, self.shape = value, value.shape

    def detach(self) -> _Sharded:
        return self

    def to_local(self) -> torch.Tensor:  # this rank's shard: its own storage
        return self.value

    def full_tensor(self) -> torch.Tensor:
        block = self.pool.setdefault(tuple(self.value.shape), torch.empty(self.value.shape))
        block.copy_(self.value)
        return block.as_subclass(_Gathered)


def test_every_sharded_parameter_is_written_for_the_engine() -> None:
    """Under FSDP2 on a GPU each gather is a temporary whose memory the next gather of its
    size reuses: told apart by address, gate_proj and up_proj, or the two layer norms, look
    like one tied weight, and the second would not reach the engine (vLLM only logs a
    weight it was not given, and nothing for one part of a packed gate_up_proj)."""
    names = ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
             "model.layers.0.input_layernorm.weight",
             "model.layers.0.post_attention_layernorm.weight"]
    shapes = [(8, 4), (8, 4), (4,), (4,)]
    weights = {n: _Sharded(torch.randn(s)) for n, s in zip(names, shapes, strict=True)}
    out = client._contiguous(weights)  # type: ignore[arg-type]
    assert sorted(out) == sorted(names), f"dropped: {sorted(set(names) - set(out))}"
    for name in names:
        assert torch.equal(out[name], weights[name].value)


def test_a_tied_head_is_given_once_under_the_embeddings_name() -> None:
    model = tiny_model(tiny_tokenizer(), heads=2)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    with policy_weights(model) as weights:
        assert "lm_head.weight" not in weights
        assert "model.embed_tokens.weight" in weights
        assert len(weights) == len(dict(model.named_parameters()))


@pytest.mark.filterwarnings("ignore:Model has `tie_word_embeddings=True`")  # peft's own hint
def test_an_adapter_on_a_tied_head_is_refused_before_the_run() -> None:
    """LoRA on an output head that is the embedding: the engine's head is its embedding, so
    the merged W + ΔW of the head had nowhere to go (vLLM logged 'Failed to load weights')
    and the engine sampled from the base head, 0.48 off in log-prob after two updates."""
    model = lora.add_adapter(tiny_model(tiny_tokenizer(), heads=2), 4, 8, 0.0,
                             ["lm_head", "q_proj"])
    with pytest.raises(EngineError, match="lora_target_modules adapts lm_head.*rollout_engine"):
        check_adapters_syncable(model)


@pytest.mark.filterwarnings("ignore:Model has `tie_word_embeddings=True`")
def test_an_adapter_on_an_embedding_tied_to_the_head_is_refused_before_the_run() -> None:
    """LoRA on the embedding changes the lookup alone, the head stays W; the engine, sent
    W + ΔW, ties its head to it: its log-probs were 165 nats off the policy's."""
    model = lora.add_adapter(tiny_model(tiny_tokenizer(), heads=2), 4, 8, 0.0,
                             ["embed_tokens", "q_proj"])
    with pytest.raises(EngineError, match="adapts model.embed_tokens.*rollout_engine"):
        check_adapters_syncable(model)


def test_adapters_on_untied_weights_are_synced() -> None:
    model = lora.add_adapter(tiny_model(tiny_tokenizer(), heads=2), 4, 8, 0.0,
                             ["q_proj", "v_proj"])
    check_adapters_syncable(model)
