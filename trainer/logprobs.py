"""Per-token log-probabilities of completion tokens under a model."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel


def completion_logps(
    model: PreTrainedModel | torch.nn.Module,
    input_ids: torch.Tensor,  # (B, P + T) prompt (left-padded) then completion
    attention_mask: torch.Tensor,  # (B, P + T)
    completion_length: int,  # T
    temperature: float = 1.0,
) -> torch.Tensor:
    """(B, T): log π(o_t | q, o_<t) for each completion token, at the sampling temperature
    (the distribution the tokens were drawn from, as TRL does)."""
    # logits for positions P-1 .. P+T-2 predict the completion tokens P .. P+T-1
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                   logits_to_keep=completion_length + 1).logits  # (B, T+1, V)
    logits = logits[:, :-1, :]  # (B, T, V)
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, -completion_length:]  # (B, T)
    selected = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)
    # log-softmax of the chosen tokens only, one sequence at a time: never a second (B, T, V)
    normaliser = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])  # (B, T)
    return selected - normaliser
