"""Data parallelism under torchrun: ``distributed: ddp`` (DDP, every rank holds the whole
model) or ``distributed: fsdp`` (FSDP2, ``torch.distributed.fsdp.fully_shard``: weights,
gradients and AdamW state sharded over the ranks, each decoder layer gathered only while it
runs). Both average gradients over ranks, so the loss code is the same for either.

Under FSDP every rank must run the same forwards: ``generate`` keeps all ranks stepping until
the last sequence anywhere is done (transformers' ``synced_gpus``, switched on by the
``_is_fsdp_managed_module`` flag that transformers itself looks for), and dynamic sampling,
whose rounds differ per rank, is refused by the config. Checkpoints gather the full weights
and optimizer state (``torch.distributed.checkpoint.state_dict``): the weights of an FSDP
checkpoint are an ordinary Hugging Face folder, and ``--resume`` under FSDP puts them and the
optimizer state back into the shards, whatever the number of ranks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks (``model.layers`` of Llama, Qwen, Mistral, ...), each one FSDP unit."""
    blocks = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    if not blocks:
        raise ValueError("distributed 'fsdp': the model has no list of layers to shard")
    return list(max(blocks, key=len))


def wrap(policy: torch.nn.Module, kind: str, device: torch.device) -> torch.nn.Module:
    """The module that runs forward and backward: DDP around ``policy``, or ``policy`` itself
    sharded in place (FSDP2 keeps the module's class and API)."""
    if kind == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in _decoder_layers(policy):
            fully_shard(layer)
        fully_shard(policy)  # the rest: embeddings, final norm, head
        for module in policy.modules():  # PeftModel -> LoraModel -> LlamaForCausalLM
            if hasattr(module, "generate"):
                module._is_fsdp_managed_module = True  # generate(synced_gpus=True)
        return policy
    ids = [device.index] if device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(policy, device_ids=ids)


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside a DDP wrapper (a second forward through DDP before the backward would
    be refused); FSDP2 shards in place, so the model itself."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) \
        else model


@contextmanager
def accumulating(model: torch.nn.Module, active: bool) -> Iterator[None]:
    """Within it (when ``active``), backward keeps gradients local: the reduction over ranks
    happens once, on the last micro-batch of the optimizer step."""
    if not active:
        yield
    elif is_sharded(model):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:
        with model.no_sync():
            yield


def clip_grad_norm(parameters: Iterable[torch.nn.Parameter], max_norm: float) -> float:
    """``clip_grad_norm_`` returning the global norm as a float (a DTensor under FSDP)."""
    norm = torch.nn.utils.clip_grad_norm_(list(parameters), max_norm)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return float(norm)


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Collective under FSDP (every rank calls it): the whole model and optimizer state, on
    the CPU of rank 0 (other ranks get empty dicts)."""
    return (get_model_state_dict(model, options=FULL),
            get_optimizer_state_dict(model, optimizer, options=FULL))


def load_full_weights(model: torch.nn.Module, weights: dict[str, Any]) -> None:
    """Every rank: whole-model weights into the sharded model (each rank keeps its shard)."""
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))


def load_full_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                        state: dict[str, Any]) -> None:
    """Every rank: a whole optimizer state (from ``full_state``) into the sharded optimizer."""
    set_optimizer_state_dict(model, optimizer, state,
                             options=StateDictOptions(full_state_dict=True))


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()
