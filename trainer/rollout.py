"""Sampling: G completions per prompt with HF ``generate`` (batched, left padding)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


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


def format_prompt(row: dict[str, Any], tokenizer: PreTrainedTokenizerBase, prompt_column: str,
                  system_prompt: str | None, use_chat_template: bool) -> str:
    prompt = row[prompt_column]
    if isinstance(prompt, list):  # already a conversation
        messages = prompt
    elif use_chat_template and tokenizer.chat_template:
        messages = [{"role": "user", "content": str(prompt)}]
    else:
        return (system_prompt + "\n" if system_prompt else "") + str(prompt)
    if system_prompt:
        messages = [{"role": "system", "content": system_prompt}, *messages]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def completion_mask(completion_ids: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask up to and including the first EOS; ``truncated`` where there is no EOS."""
    is_eos = completion_ids == eos_id  # (N, T)
    has_eos = is_eos.any(1)
    first = torch.where(has_eos, is_eos.float().argmax(1), torch.full_like(has_eos, 10**9,
                                                                           dtype=torch.long))
    positions = torch.arange(completion_ids.shape[1], device=completion_ids.device)
    mask = (positions.unsqueeze(0) <= first.unsqueeze(1)).long()
    return mask, ~has_eos


@torch.no_grad()
def generate(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, rows: list[dict[str, Any]],
    prompts: list[str], num_generations: int, max_prompt_length: int,
    max_completion_length: int, temperature: float, top_p: float,
) -> Rollout:
    device = next(model.parameters()).device
    enc = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True,
                    max_length=max_prompt_length, add_special_tokens=False).to(device)
    prompt_ids = enc.input_ids.repeat_interleave(num_generations, 0)  # (N, P)
    prompt_mask = enc.attention_mask.repeat_interleave(num_generations, 0)
    out = model.generate(
        input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True,
        temperature=temperature, top_p=top_p, top_k=0, max_new_tokens=max_completion_length,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    completion_ids = out[:, prompt_ids.shape[1]:]  # (N, T)
    mask, truncated = completion_mask(completion_ids, tokenizer.eos_token_id)
    completion_ids = completion_ids * mask + tokenizer.pad_token_id * (1 - mask)
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    repeated_rows = [row for row in rows for _ in range(num_generations)]
    return Rollout(prompt_ids, prompt_mask, completion_ids, mask, truncated, texts,
                   repeated_rows)


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
    )
