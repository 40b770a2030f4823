"""Position ids counted from each row's first real token, as ``generate`` counts them.

A left-padded row run with the default positions (0 .. L-1 over the padded width) starts its
text at the number of pads: RoPE models barely notice (the rotation between two tokens is the
same), but models with a learned embedding per position (GPT-2, GPT-Neo) compute another
sequence than the one sampled, 0.14 nats apart on a tiny GPT-2. ``generate`` takes
``cumsum(mask) - 1``, 0 on pads; the update and the prefilled prompt cache take the same, so
sampling, old, reference and trained log-probs all see one sequence whatever its padding.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any

import torch


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """(B, L) positions: 0 at each row's first real token (and on the pads before it)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def forward_parameters(model: torch.nn.Module) -> frozenset[str]:
    """The argument names of the transformers model inside ``model`` (a DDP wrapper, a peft
    model): what its forward can be given."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model = model.module
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    return _parameters_of(type(base))


@lru_cache(maxsize=64)
def _parameters_of(model_class: type) -> frozenset[str]:
    """Per class, not per call: this runs for every micro-batch and every generate call."""
    return frozenset(inspect.signature(model_class.forward).parameters)


def position_kwargs(model: torch.nn.Module, positions: torch.Tensor) -> dict[str, Any]:
    """``position_ids=positions`` for a model that takes them; nothing for one that derives
    its positions from the mask itself (Bloom's ALiBi)."""
    return {"position_ids": positions} if "position_ids" in forward_parameters(model) else {}
