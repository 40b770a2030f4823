"""LoRA adapters through ``peft`` (Hu et al. 2021, https://arxiv.org/abs/2106.09685).

With ``lora_r > 0`` the policy is the frozen base model plus trainable low-rank adapters;
the optimizer holds only the adapters. For β > 0 the reference policy is the same base with
the adapter switched off (``reference``): no second copy of the model in memory (TRL does the
same for a PEFT model). Checkpoints hold the adapter only (``adapter_model.safetensors``);
``merge`` writes base + adapter as one plain Hugging Face model folder.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch

ADAPTER_FILE = "adapter_model.safetensors"


def is_lora(model: torch.nn.Module) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def add_adapter(model: Any, r: int, alpha: float, dropout: float,
                target_modules: str | list[str]) -> Any:
    """Wrap ``model`` in a peft LoRA model; the base weights stop requiring gradients."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout,
                        target_modules=target_modules, task_type="CAUSAL_LM")
    with _peft_warnings():
        # autocast_adapter_dtype=False: the adapter keeps the base's (float32 master) dtype
        return get_peft_model(model, config, autocast_adapter_dtype=False)


@contextmanager
def _peft_warnings() -> Iterator[None]:
    """peft 0.21 reads ``is_gradient_checkpointing``, which transformers 5 deprecates."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated",
                                FutureWarning)
        yield


def reference(model: torch.nn.Module) -> AbstractContextManager[Any]:
    """Within it, ``model`` is its base policy: the adapter is bypassed."""
    return model.disable_adapter() if is_lora(model) else nullcontext()


def load_adapter(model: Any, checkpoint: Path) -> None:
    """Put a checkpoint's adapter weights into ``model`` (already a LoRA model)."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = checkpoint / ADAPTER_FILE
    if not path.exists():
        raise FileNotFoundError(f"{checkpoint} holds no LoRA adapter ({ADAPTER_FILE}); was "
                                "it written with lora_r = 0?")
    result = set_peft_model_state_dict(model, load_file(path))
    if result.unexpected_keys:
        raise ValueError(f"{path}: weights the model has no place for: "
                         f"{result.unexpected_keys[:3]}")


def merge(checkpoint: Path, output: Path, model_name: str | None = None, seed: int = 0) -> Path:
    """Base model + the checkpoint's adapter, merged into plain weights, saved in ``output``
    with the tokenizer. The base is the run's ``model`` (from the run folder's
    ``config.json``) unless ``model_name`` is given."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    from trainer.models import load_model

    if not (checkpoint / ADAPTER_FILE).exists():
        raise FileNotFoundError(f"{checkpoint} holds no LoRA adapter ({ADAPTER_FILE})")
    if model_name is None:
        run_config = checkpoint.parent / "config.json"
        if not run_config.exists():
            raise FileNotFoundError(f"{run_config} not found: name the base model with "
                                    "--set model=...")
        saved = json.loads(run_config.read_text())
        model_name, seed = saved["model"], int(saved.get("seed", seed))
    base, _ = load_model(model_name, torch.float32, seed)
    with _peft_warnings():
        merged = PeftModel.from_pretrained(base, checkpoint).merge_and_unload()
    output.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(output)
    AutoTokenizer.from_pretrained(checkpoint, local_files_only=True).save_pretrained(output)
    return output
