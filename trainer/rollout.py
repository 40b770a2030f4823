"""Sampling: G completions per prompt with HF ``generate`` (batched, left padding)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteriaList,
)

from trainer.prefix import cache_kwarg, prefill


@dataclass
class Rollout:
    """One generate() call's output, G completions per prompt, groups contiguous."""

    prompt_ids: torch.Tensor  # (N, P) left-padded
    prompt_mask: torch.Tensor  # (N, P)
    completion_ids: torch.Tensor  # (N, T) right-padded after EOS
    completion_mask: torch.Tensor  # (N, T) 1 up to and including the first EOS
    truncated: torch.Tensor  # (N,) bool: no EOS within max_completion_length
    texts: list[str]  # (N,) decoded completions
    rows: list[dict[str, Any]]  # (N,) the dataset row of each completion's prompt
    prompt_cut: torch.Tensor  # (N,) bool: the prompt was longer than max_prompt_length
    # with a code tool (trainer/multiturn.py), TRL's names: 1 where the policy wrote the
    # token, 0 where a tool's output stands (out of the loss and the KL); None: all policy's
    tool_mask: torch.Tensor | None = None  # (N, T)
    # (N, 4): calls, failed calls, program errors, outages (failed calls the policy did not
    # cause: its reward is null)
    tool_stats: torch.Tensor | None = None
    tool_seconds: float = 0.0  # wall clock spent waiting for the tool
    # (N, T): each sampled token's log-prob under the engine that drew it (trainer/engine),
    # 0 past the completion; None where the policy itself sampled (HF generate)
    engine_logps: torch.Tensor | None = None

    def select(self, index: list[int]) -> Rollout:
        """The completions at ``index``, in that order (``tool_seconds`` kept whole)."""
        idx = torch.tensor(index, dtype=torch.long)

        def rows(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[idx]

        return Rollout(self.prompt_ids[idx], self.prompt_mask[idx], self.completion_ids[idx],
                       self.completion_mask[idx], self.truncated[idx],
                       [self.texts[i] for i in index], [self.rows[i] for i in index],
                       self.prompt_cut[idx], rows(self.tool_mask), rows(self.tool_stats),
                       self.tool_seconds, rows(self.engine_logps))


@dataclass(frozen=True)
class Prompt:
    """A prompt's text, and whether a chat template wrote it. A template writes the special
    tokens its model expects (Llama 3's, Mistral's and Gemma's begin with BOS), so its text is
    tokenized as it stands, as ``apply_chat_template(tokenize=True)`` and vLLM's chat endpoint
    do; raw text gets the tokens the tokenizer puts before a text (a base model saw a BOS
    before every document), as ``tokenizer(text)`` and vLLM's completions endpoint do."""

    text: str
    templated: bool


def format_prompt(row: dict[str, Any], tokenizer: PreTrainedTokenizerBase, prompt_column: str,
                  system_prompt: str | None, use_chat_template: bool,
                  prompt_suffix: str = "", tools: list[dict[str, Any]] | None = None) -> Prompt:
    """``prompt_suffix`` ends a text prompt (the user's message), where an instruction goes
    in veRL's data recipes; a conversation is taken as it is. ``tools``: schemas the
    template renders (a code tool in its own call format, trainer/tools.py)."""
    prompt = row[prompt_column]
    if isinstance(prompt, list):  # already a conversation
        messages = prompt
    elif use_chat_template and tokenizer.chat_template:
        messages = [{"role": "user", "content": str(prompt) + prompt_suffix}]
    else:
        return Prompt((system_prompt + "\n" if system_prompt else "") + str(prompt)
                      + prompt_suffix, False)
    if system_prompt:
        messages = [{"role": "system", "content": system_prompt}, *messages]
    return Prompt(tokenizer.apply_chat_template(messages, tokenize=False, tools=tools,
                                                add_generation_prompt=True), True)


@dataclass(frozen=True)
class Sampling:
    """How completions are drawn. Exactly these settings are used: nothing is taken from the
    model's ``generation_config`` (a ``repetition_penalty`` or ``min_p`` there would draw from
    another distribution than π/T, which the log-probs of the loss assume)."""

    num_generations: int
    max_prompt_length: int
    max_completion_length: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    share_prompts: bool = True  # one prefill per prompt for its G samples (trainer.prefix)


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS and all of the model's
    ``generation_config.eos_token_id`` (Llama 3 and Qwen list several, e.g. <|eot_id|>)."""
    ids: list[int] = []
    config = getattr(model, "generation_config", None)
    from_model = getattr(config, "eos_token_id", None)
    candidates = [tokenizer.eos_token_id,
                  *(from_model if isinstance(from_model, list | tuple) else [from_model])]
    for i in candidates:
        if i is not None and int(i) not in ids:
            ids.append(int(i))
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation_config has an EOS id")
    return ids


def leading_special_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The ids the tokenizer puts before a text: BOS for Llama, Mistral and Gemma (through a
    post-processor template or ``add_bos_token``), none for GPT-2 or Qwen. Read off an encoding,
    not from ``bos_token``: many tokenizers name a BOS they never add. What it puts after a
    text (an EOS, where ``add_eos_token`` is set) is left out: a prompt does not end a
    document."""
    probe = "a"
    plain = tokenizer(probe, add_special_tokens=False).input_ids
    full = tokenizer(probe).input_ids
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return full[:start]
    return []


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: list[Prompt],
                   max_prompt_length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, mask, cut): left-padded prompt ids, at most ``max_prompt_length`` each. A longer
    prompt loses the start of its text, as in TRL: the end holds the chat template's assistant
    header, which the completion must follow; a raw prompt's BOS is put back before the rest.
    ``cut`` (N,) bool marks those prompts."""
    lead = leading_special_ids(tokenizer)
    encoded = tokenizer([p.text for p in prompts], add_special_tokens=False).input_ids
    kept, cut = [], []
    for prompt, ids in zip(prompts, encoded, strict=True):
        # a raw text that already starts with the BOS (written out) gets no second one
        head = [] if prompt.templated or ids[: len(lead)] == lead else lead
        room = max(max_prompt_length - len(head), 1)
        cut.append(len(head) + len(ids) > max_prompt_length)
        kept.append((head + ids[-room:])[-max_prompt_length:])
    padded = tokenizer.pad({"input_ids": kept}, padding=True, padding_side="left",
                           return_tensors="pt", return_attention_mask=True)
    return padded["input_ids"], padded["attention_mask"], torch.tensor(cut)


def completion_mask(completion_ids: torch.Tensor, eos_ids: int | list[int]
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask up to and including the first EOS (any of ``eos_ids``); ``truncated`` where
    there is none."""
    eos = torch.tensor(eos_ids if isinstance(eos_ids, list) else [eos_ids],
                       device=completion_ids.device)
    is_eos = torch.isin(completion_ids, eos)  # (N, T)
    has_eos = is_eos.any(1)
    first = torch.where(has_eos, is_eos.float().argmax(1), torch.full_like(has_eos, 10**9,
                                                                           dtype=torch.long))
    positions = torch.arange(completion_ids.shape[1], device=completion_ids.device)
    mask = (positions.unsqueeze(0) <= first.unsqueeze(1)).long()
    return mask, ~has_eos


def generation_config(sampling: Sampling, eos_ids: list[int], pad_id: int,
                      greedy: bool = False) -> GenerationConfig:
    """The settings of one generate() call; anything unset is transformers' neutral global
    default (``_model_defaults_hidden``)."""
    sample = {} if greedy else {"temperature": sampling.temperature, "top_p": sampling.top_p,
                                "top_k": sampling.top_k}
    return GenerationConfig(do_sample=not greedy, max_new_tokens=sampling.max_completion_length,
                            eos_token_id=eos_ids, pad_token_id=pad_id, **sample)


@contextmanager
def _model_defaults_hidden(model: PreTrainedModel) -> Iterator[None]:
    """transformers fills every field a GenerationConfig leaves unset (None: ``min_p``,
    ``suppress_tokens``, ...) from ``model.generation_config``; a neutral one stands in for it
    during the call, as TRL does for transformers < 5 (its ``_override_model_generation_config``).
    """
    owner = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    saved = owner.generation_config
    owner.generation_config = GenerationConfig()
    try:
        yield
    finally:
        owner.generation_config = saved


def _generate(model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor,
              config: GenerationConfig, G: int = 1, share: bool = False,
              stopping_criteria: StoppingCriteriaList | None = None) -> torch.Tensor:
    """(N·G, T) new tokens, G samples of each prompt row. ``share``: each prompt's cache is
    computed once for its G samples (trainer.prefix), where the model allows.
    ``stopping_criteria``: ends a row before its EOS (a tool call, trainer/multiturn.py)."""
    cache = prefill(model, ids, mask, G) if share and G > 1 else None
    ids, mask = ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0)
    extra: dict[str, Any] = {} if cache is None else {cache_kwarg(model): cache}
    if stopping_criteria is not None:
        extra["stopping_criteria"] = stopping_criteria
    with _model_defaults_hidden(model):
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                             **extra)
    return out[:, ids.shape[1]:]  # (N·G, T)


@torch.no_grad()
def generate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
             rows: list[dict[str, Any]], prompts: list[Prompt], sampling: Sampling) -> Rollout:
    """G = ``sampling.num_generations`` completions per prompt, drawn from π/T."""
    device = next(model.parameters()).device
    G = sampling.num_generations
    ids, mask, cut = encode_prompts(tokenizer, prompts, sampling.max_prompt_length)
    ids, mask = ids.to(device), mask.to(device)
    eos_ids = eos_token_ids(model, tokenizer)
    config = generation_config(sampling, eos_ids, tokenizer.pad_token_id)
    completion_ids = _generate(model, ids, mask, config, G, sampling.share_prompts)
    prompt_ids, prompt_mask = ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0)
    cmask, truncated = completion_mask(completion_ids, eos_ids)
    completion_ids = completion_ids * cmask + tokenizer.pad_token_id * (1 - cmask)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    repeated_rows = [row for row in rows for _ in range(G)]
    return Rollout(prompt_ids, prompt_mask, completion_ids, cmask, truncated, texts,
                   repeated_rows, cut.repeat_interleave(G))


@torch.no_grad()
def greedy_texts(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 prompts: list[Prompt], sampling: Sampling) -> list[str]:
    """One greedy completion per prompt (evaluation), stopped at any EOS id."""
    device = next(model.parameters()).device
    ids, mask, _ = encode_prompts(tokenizer, prompts, sampling.max_prompt_length)
    eos_ids = eos_token_ids(model, tokenizer)
    config = generation_config(sampling, eos_ids, tokenizer.pad_token_id, greedy=True)
    completion_ids = _generate(model, ids.to(device), mask.to(device), config)
    cmask, _ = completion_mask(completion_ids, eos_ids)
    completion_ids = completion_ids * cmask + tokenizer.pad_token_id * (1 - cmask)
    return tokenizer.batch_decode(completion_ids, skip_special_tokens=True)


def pad_and_stack(rollouts: list[Rollout], pad_id: int) -> Rollout:
    """Concatenate rollouts whose prompt/completion widths differ (left/right padding)."""
    if len(rollouts) == 1:
        return rollouts[0]
    P = max(r.prompt_ids.shape[1] for r in rollouts)
    T = max(r.completion_ids.shape[1] for r in rollouts)

    def left(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
        return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)

    def right(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    return Rollout(
        prompt_ids=torch.cat([left(r.prompt_ids, P, pad_id) for r in rollouts]),
        prompt_mask=torch.cat([left(r.prompt_mask, P, 0) for r in rollouts]),
        completion_ids=torch.cat([right(r.completion_ids, T, pad_id) for r in rollouts]),
        completion_mask=torch.cat([right(r.completion_mask, T, 0) for r in rollouts]),
        truncated=torch.cat([r.truncated for r in rollouts]),
        texts=[t for r in rollouts for t in r.texts],
        rows=[row for r in rollouts for row in r.rows],
        prompt_cut=torch.cat([r.prompt_cut for r in rollouts]),
        tool_mask=(None if all(r.tool_mask is None for r in rollouts) else torch.cat([
            right(r.completion_mask if r.tool_mask is None else r.tool_mask, T, 0)
            for r in rollouts])),
        tool_stats=(None if all(r.tool_stats is None for r in rollouts) else torch.cat([
            torch.zeros(len(r.texts), 4, dtype=torch.long) if r.tool_stats is None
            else r.tool_stats for r in rollouts])),
        tool_seconds=sum(r.tool_seconds for r in rollouts),
        engine_logps=(None if any(r.engine_logps is None for r in rollouts) else torch.cat([
            right(r.engine_logps, T, 0) for r in rollouts])),
    )
