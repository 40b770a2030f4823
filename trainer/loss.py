"""The GRPO policy loss and its variants, as one pure function.

Per completion token t of sequence i (shapes: B sequences, T completion tokens):

    log ρ_{i,t} = log π_θ(o_t | q, o_<t) − log π_θ_old(o_t | q, o_<t)       token level
    log ρ_{i}   = (1/|o_i|) Σ_t log ρ_{i,t}                                  sequence level (GSPO)
    ρ̂          = clip(ρ, 1 − ε_low, 1 + ε_high)                             (DAPO clip-higher)
    L_{i,t}     = − min(ρ A_i, ρ̂ A_i) + β · KL_{i,t}
    KL_{i,t}    = exp(ref − logp) − (ref − logp) − 1                        (k3 estimator)

and the variants differ only in how L is reduced to a scalar:

    grpo     mean over sequences of (token mean within the sequence)       (DeepSeekMath)
    bnpo     mean over every token of the batch
    dr_grpo  token sum / (B · max_completion_length)                       (Dr. GRPO)
    dapo     token sum / number of tokens in the global batch              (DAPO)

Names and definitions follow TRL's GRPOTrainer (``clip_ratio/low_mean`` etc.), so a user moving
from TRL reads the same numbers.
"""

from __future__ import annotations

from typing import Literal

import torch

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ImportanceSamplingLevel = Literal["token", "sequence"]


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def policy_loss(
    logps: torch.Tensor,  # (B, T) log π_θ of the sampled tokens, with grad
    old_logps: torch.Tensor | None,  # (B, T) at sampling time; None: logps.detach() (μ = 1)
    ref_logps: torch.Tensor | None,  # (B, T) frozen reference; None when beta = 0
    advantages: torch.Tensor,  # (B,)
    mask: torch.Tensor,  # (B, T) 1 for completion tokens that count
    *,
    loss_type: LossType = "grpo",
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    beta: float = 0.0,
    importance_sampling_level: ImportanceSamplingLevel = "token",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,  # dapo: tokens in the global batch
) -> tuple[torch.Tensor, dict[str, float]]:
    mask = mask.to(logps.dtype)
    old = logps.detach() if old_logps is None else old_logps
    log_ratio = logps - old  # (B, T)
    if importance_sampling_level == "token":
        log_weights = log_ratio  # (B, T)
    elif importance_sampling_level == "sequence":
        seq = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # (B,)
        log_weights = seq.unsqueeze(-1)  # (B, 1), broadcast over tokens
    else:
        raise ValueError(f"importance_sampling_level must be 'token' or 'sequence', "
                         f"got {importance_sampling_level!r}")

    ratio = torch.exp(log_weights)  # ρ
    clipped_ratio = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)  # ρ̂
    adv = advantages.unsqueeze(-1)  # (B, 1)
    per_token_loss = -torch.min(ratio * adv, clipped_ratio * adv)  # (B, T)

    metrics: dict[str, float] = {}
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("ref_logps is required when beta != 0")
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1  # (B, T), k3
        per_token_loss = per_token_loss + beta * kl
        metrics["kl"] = _masked_mean(kl.detach(), mask).item()

    B = logps.shape[0]
    if loss_type == "grpo":
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("dr_grpo needs max_completion_length")
        loss = (per_token_loss * mask).sum() / (B * max_completion_length)
    elif loss_type == "dapo":
        normalizer = mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = (per_token_loss * mask).sum() / max(float(normalizer), 1.0)
    else:
        raise ValueError(f"unknown loss_type {loss_type!r}")

    with torch.no_grad():
        token_ratio = ratio.expand_as(mask)
        low = ((token_ratio < 1 - epsilon_low) & (adv < 0)).to(mask.dtype)
        high = ((token_ratio > 1 + epsilon_high) & (adv > 0)).to(mask.dtype)
        metrics["clip_ratio/low_mean"] = _masked_mean(low, mask).item()
        metrics["clip_ratio/high_mean"] = _masked_mean(high, mask).item()
        metrics["clip_ratio/region_mean"] = _masked_mean(((low + high) > 0).to(mask.dtype),
                                                         mask).item()
        metrics["ratio_mean"] = _masked_mean(token_ratio, mask).item()
    return loss, metrics
