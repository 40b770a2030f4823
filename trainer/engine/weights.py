"""The policy's weights as an inference engine loads them: full tensors under the base
model's checkpoint names, a LoRA adapter merged in (TRL's ``_sync_peft_weights`` does the
same for its vLLM engine)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

_PEFT_PREFIX = "base_model.model."


@contextmanager
def policy_weights(policy: torch.nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """``{name: tensor}`` of ``policy``, valid inside the ``with``. With a LoRA adapter the
    weights are merged for the while (W + BA·α/r, exactly what the policy computes) and
    unmerged after, and the adapter's own tensors are left out."""
    if not hasattr(policy, "merge_adapter"):
        yield dict(policy.state_dict())
        return
    policy.merge_adapter()
    try:
        weights = {}
        for name, tensor in policy.state_dict().items():
            if "lora_" in name or "original_module" in name:
                continue
            name = name.removeprefix(_PEFT_PREFIX).replace(".base_layer", "")
            weights[name.replace("modules_to_save.default.", "")] = tensor
        yield weights
    finally:
        policy.unmerge_adapter()
