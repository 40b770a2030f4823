"""Shared prompts: the G completions of a group have one prompt, so it is run once.

Run as G whole sequences, a group's prompt goes through the model G times: in the demo (47
prompt tokens, 16 completion tokens, G = 8) three quarters of every batch's tokens are prompt
copies. Here the prompt runs once and each layer's keys and values are handed to the group's
completions (Prefix Grouper's Shared-Prefix Forward, Liu et al. 2025, arXiv 2506.05433). The
expansion is an index, whose backward sums the G completions' gradients into the one prompt
pass, so log-probs and gradients are those of the plain forward, for a third of the work.
Sampling gets the same saving from a prefilled KV cache handed to ``generate`` (what vLLM's
prefix caching does for inference).

Both go through transformers' Cache API with two small caches that never store what a layer
gives them after they are built, so a layer replayed by gradient checkpointing reads and
returns exactly what it did the first time. A model or transformers version that does not
hand every layer's keys and values through the cache is detected (each layer must have read
the shared prefix) and the plain forward is used instead, with a warning once.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import DynamicCache

from trainer.positions import forward_parameters, position_ids, position_kwargs


class _Recorder(DynamicCache):
    """The prompt pass's cache: keeps each layer's keys and values, and answers like an empty
    cache (the prompt attends to itself only). A checkpointed replay records again; nothing
    reads the copy."""

    def __init__(self) -> None:
        super().__init__()
        self.recorded: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.recorded[layer_idx] = (key_states, value_states)
        return key_states, value_states


class _SharedPrefix(DynamicCache):
    """The completion pass's cache: each sequence's prompt keys and values (rows of the prompt
    pass picked by ``inverse``) before its own, read-only, so that a replay sees the same."""

    def __init__(self, recorded: dict[int, tuple[torch.Tensor, torch.Tensor]],
                 inverse: torch.Tensor) -> None:
        # the cache's layers hold the distinct prompts (u rows): they size the masks and
        # positions (prompt length P); the (n, ...) expansion is made in ``update``
        super().__init__(ddp_cache_data=[recorded[i] for i in range(len(recorded))])
        self.prefix = recorded
        self.inverse = inverse
        self.read: set[int] = set()

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.read.add(layer_idx)
        keys, values = self.prefix[layer_idx]
        return (torch.cat([keys.index_select(0, self.inverse), key_states], dim=-2),
                torch.cat([values.index_select(0, self.inverse), value_states], dim=-2))


def group_rows(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(first, inverse): the row of each distinct prompt, and for every row the index of its
    prompt in ``first``. Only neighbours are merged: a group's G rows are contiguous."""
    n = prompt_ids.shape[0]
    repeats = torch.zeros(n, dtype=torch.bool, device=prompt_ids.device)
    if n > 1:
        repeats[1:] = ((prompt_ids[1:] == prompt_ids[:-1]).all(1)
                       & (prompt_mask[1:] == prompt_mask[:-1]).all(1))
    first = (~repeats).nonzero().flatten()
    inverse = torch.cumsum((~repeats).long(), 0) - 1
    return first, inverse


def cache_kwarg(model: torch.nn.Module) -> str:
    """transformers >= 5 calls the cache ``cache``; earlier versions ``past_key_values``."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


@contextmanager
def _checkpointing_keeps_cache(model: torch.nn.Module) -> Iterator[None]:
    """transformers' gradient checkpointing drops a layer's cache (a cache that stores would
    be written twice by the replay); these two never store, so the layers may keep them.
    Without gradients nothing is checkpointed, and the modules are not walked."""
    if not torch.is_grad_enabled():
        yield
        return
    layers = [m for m in model.modules() if hasattr(m, "_can_checkpoint_with_cache")]
    saved = [m.__dict__.get("_can_checkpoint_with_cache") for m in layers]
    for layer in layers:
        layer._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for layer, value in zip(layers, saved, strict=True):
            if value is None:
                del layer._can_checkpoint_with_cache  # the class's value again
            else:
                layer._can_checkpoint_with_cache = value


_warned = False
_cannot_share: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
# layers whose cache is keys and values; a recurrent state (linear attention, convolutions:
# Qwen3-Next, LFM2) cannot be handed from one pass to another this way
_ATTENTION_LAYERS = {"full_attention", "sliding_attention", "chunked_attention"}


def shareable(model: torch.nn.Module) -> bool:
    """Whether every layer of ``model`` keeps keys and values, its positions' rotations do not
    depend on the sequence's length, and it has not failed to use a shared prompt before."""
    if model in _cannot_share:
        return False
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kinds = getattr(text, "layer_types", None) or []
    return (all(kind in _ATTENTION_LAYERS for kind in kinds)
            and not any(_length_dependent(kind) for kind in _rope_types(text)))


def _rope_types(config: Any) -> list[str]:
    """Every RoPE type of ``config``: ``rope_parameters`` (transformers >= 5; one dict, or one
    per layer type as in Gemma 3) or ``rope_scaling`` (earlier; ``type`` in older configs)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if not isinstance(params, dict):
        return []
    dicts = [params] if "rope_type" in params or "type" in params else list(params.values())
    return [str(d.get("rope_type", d.get("type"))) for d in dicts if isinstance(d, dict)]


def _length_dependent(rope_type: str) -> bool:
    """RoPEs whose frequencies are chosen from the longest position in the forward (the
    kinds transformers' ``dynamic_rope_update`` recomputes): longrope (Phi-3/4-mini: short
    factors up to ``original_max_position_embeddings``, long ones past it) and dynamic NTK.
    A prompt run alone would get other rotations than within its whole sequence."""
    return rope_type == "longrope" or "dynamic" in rope_type


def _fall_back(model: torch.nn.Module, reason: str) -> None:
    global _warned
    _cannot_share.add(model)  # not tried again: the prompt pass would be wasted each time
    if not _warned:
        warnings.warn(f"shared-prompt forward unavailable ({reason}): every completion runs its "
                      "prompt again (slower, same result)", stacklevel=3)
        _warned = True


def shared_prompt_logits(
    model: torch.nn.Module,
    prompt_model: torch.nn.Module,
    input_ids: torch.Tensor,  # (n, P + T) prompt (left-padded) then completion
    attention_mask: torch.Tensor,  # (n, P + T)
    completion_length: int,  # T
) -> torch.Tensor | None:
    """(n, T, V) logits predicting the T completion tokens, each distinct prompt run once;
    None where nothing is shared (every prompt distinct, or one completion token) or the model
    cannot share. ``prompt_model`` runs the prompt pass: the module inside a DDP wrapper, so
    that ``model`` (DDP, whose forward arms the gradient all-reduce) runs exactly once either
    way. Not for FSDP: whether a batch shares depends on its data, and FSDP needs every rank
    to run the same forwards."""
    T = completion_length
    P = input_ids.shape[1] - T
    if P < 1 or T < 2 or not shareable(prompt_model):
        return None
    prompt_ids, prompt_mask = input_ids[:, :P], attention_mask[:, :P]
    first, inverse = group_rows(prompt_ids, prompt_mask)
    if len(first) == input_ids.shape[0]:
        return None
    kwarg = cache_kwarg(prompt_model)
    positions = position_ids(attention_mask)  # (n, P + T), as the whole forward gets them
    recorder = _Recorder()
    with _checkpointing_keeps_cache(prompt_model):
        # the prompt's last position predicts the first completion token
        head = prompt_model(input_ids=prompt_ids[first], attention_mask=prompt_mask[first],
                            use_cache=False, logits_to_keep=1, **{kwarg: recorder},
                            **position_kwargs(prompt_model, positions[first, :P])).logits
    layers = len(recorder.recorded)
    if layers == 0 or sorted(recorder.recorded) != list(range(layers)):
        _fall_back(prompt_model, "the model did not pass its keys and values through the cache")
        return None
    prefix = _SharedPrefix(recorder.recorded, inverse)
    with _checkpointing_keeps_cache(model):
        # completion tokens 0 .. T-2 predict tokens 1 .. T-1; the last one predicts nothing
        rest = model(input_ids=input_ids[:, P:-1], attention_mask=attention_mask[:, :-1],
                     use_cache=False, **{kwarg: prefix},
                     **position_kwargs(prompt_model, positions[:, P:-1])).logits  # (n, T-1, V)
    if len(prefix.read) != layers:
        _fall_back(prompt_model, "a layer did not read the shared prompt")
        return None
    return torch.cat([head.index_select(0, inverse), rest], dim=1)


@torch.no_grad()
def prefill(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, G: int
            ) -> DynamicCache | None:
    """A KV cache of every prompt but its last token, computed once per prompt and repeated
    for its G samples; ``generate`` then runs only the last prompt token and the new ones.
    Positions are counted from the first real token, as ``generate`` counts them."""
    if ids.shape[1] < 2 or not shareable(model):
        return None
    kwarg = cache_kwarg(model)
    cache = DynamicCache()
    model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], use_cache=True, logits_to_keep=1,
          **{kwarg: cache}, **position_kwargs(model, position_ids(mask)[:, :-1]))
    if cache.get_seq_length() != ids.shape[1] - 1:
        _fall_back(model, "the model did not fill the cache it was given")
        return None
    cache.batch_repeat_interleave(G)
    return cache
