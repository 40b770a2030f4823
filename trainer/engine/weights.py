"""The policy's weights as an inference engine loads them: full tensors under the base
model's checkpoint names, a LoRA adapter merged in (TRL's ``_sync_peft_weights`` does the
same for its vLLM engine, by merging into the base weights and unmerging after)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from trainer.engine.client import EngineError

_PEFT_PREFIX = "base_model.model."


@contextmanager
def policy_weights(policy: torch.nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """``{name: tensor}`` of ``policy``, valid inside the ``with``. With a LoRA adapter each
    adapted weight is W + BA·α/r, exactly what the policy computes, made beside W, and the
    adapter's own tensors are left out. A tied weight (an output head that is the
    embedding) is listed once, under its first name: the engine ties it itself."""
    tied = tied_names(policy)
    if not hasattr(policy, "merge_adapter"):
        yield {name: t for name, t in policy.state_dict().items() if name not in tied}
        return
    # not merge_adapter/unmerge_adapter: W + ΔW − ΔW is not W in floating point (about one
    # element in 14 moved by an ulp per sync), so the frozen base, and with it the LoRA
    # reference of the KL term, would drift with every step's sync
    merged = _merged_weights(policy)
    weights = {}
    for name, tensor in policy.state_dict().items():
        if "lora_" in name or "original_module" in name or name in tied:
            continue
        tensor = merged.get(name, tensor)
        name = name.removeprefix(_PEFT_PREFIX).replace(".base_layer", "")
        weights[name.replace("modules_to_save.default.", "")] = tensor
    yield weights


def tied_names(model: torch.nn.Module) -> set[str]:
    """The names of parameters that are another name's parameter (all but the first of
    each): known by identity, the same on every rank, where an address is not (a sharded
    parameter's local shard may be empty)."""
    return {name for names in _tied_groups(model) for name in names[1:]}


def _tied_groups(model: torch.nn.Module) -> list[list[str]]:
    """The names of each parameter that has more than one, first name first."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return [group for group in names.values() if len(group) > 1]


def check_adapters_syncable(policy: torch.nn.Module) -> None:
    """An adapter on either side of a tied weight (LoRA on an output head that is the
    embedding, or on the embedding) cannot reach an engine: the policy computes W + ΔW on
    one side and W on the other, while the engine ties both to the one weight it is sent.
    Said before the run, not found in its log-probs (an adapter on the embedding sent as
    W + ΔW made the engine's head W + ΔW too: log-probs 165 nats off)."""
    shared = {name for names in _tied_groups(policy) for name in names}
    on_tied = [name.removeprefix(_PEFT_PREFIX).removesuffix(".base_layer.weight")
               for name, _ in _adapted_layers(policy) if f"{name}.base_layer.weight" in shared]
    if on_tied:
        raise EngineError(
            f"lora_target_modules adapts {', '.join(on_tied)}, whose weight this model ties "
            "between its embedding and its output head: the vLLM engine cannot hold that "
            "adapter; leave it out of "
            "lora_target_modules, or set rollout_engine: hf")


def _adapted_layers(policy: torch.nn.Module) -> Iterator[tuple[str, Any]]:
    """(name, layer) of each LoRA layer whose adapters are not merged in."""
    from peft.tuners.lora import LoraLayer

    for name, module in policy.named_modules():
        if isinstance(module, LoraLayer) and not module.merged:
            yield name, module


@torch.no_grad()
def _merged_weights(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{state_dict name of a LoRA layer's base weight: that weight + its active
    adapters' ΔW}``, new tensors, the base left as it is."""
    merged: dict[str, torch.Tensor] = {}
    for name, module in _adapted_layers(policy):
        base = module.get_base_layer()
        weight = base.weight.detach()
        for adapter in module.active_adapters:
            if adapter in module.lora_A or adapter in module.lora_embedding_A:
                weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
        merged[f"{name}.base_layer.weight"] = weight
    return merged
