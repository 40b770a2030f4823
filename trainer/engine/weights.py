"""The policy's weights as an inference engine loads them: full tensors under the base
model's checkpoint names, a LoRA adapter merged in (TRL's ``_sync_peft_weights`` does the
same for its vLLM engine, by merging into the base weights and unmerging after)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

_PEFT_PREFIX = "base_model.model."


@contextmanager
def policy_weights(policy: torch.nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """``{name: tensor}`` of ``policy``, valid inside the ``with``. With a LoRA adapter each
    adapted weight is W + BA·α/r, exactly what the policy computes, made beside W, and the
    adapter's own tensors are left out."""
    if not hasattr(policy, "merge_adapter"):
        yield dict(policy.state_dict())
        return
    # not merge_adapter/unmerge_adapter: W + ΔW − ΔW is not W in floating point (about one
    # element in 14 moved by an ulp per sync), so the frozen base, and with it the LoRA
    # reference of the KL term, would drift with every step's sync
    merged = _merged_weights(policy)
    weights = {}
    for name, tensor in policy.state_dict().items():
        if "lora_" in name or "original_module" in name:
            continue
        tensor = merged.get(name, tensor)
        name = name.removeprefix(_PEFT_PREFIX).replace(".base_layer", "")
        weights[name.replace("modules_to_save.default.", "")] = tensor
    yield weights


@torch.no_grad()
def _merged_weights(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``{state_dict name of a LoRA layer's base weight: that weight + its active
    adapters' ΔW}``, new tensors, the base left as it is."""
    from peft.tuners.lora import LoraLayer

    merged: dict[str, torch.Tensor] = {}
    for name, module in policy.named_modules():
        if not isinstance(module, LoraLayer) or module.merged:
            continue
        base = module.get_base_layer()
        weight = base.weight.detach()
        for adapter in module.active_adapters:
            if adapter in module.lora_A or adapter in module.lora_embedding_A:
                weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
        merged[f"{name}.base_layer.weight"] = weight
    return merged
