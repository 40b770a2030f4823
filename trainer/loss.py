"""The GRPO policy loss and its variants, as one pure function.

Per completion token t of sequence i (shapes: B sequences, T completion tokens):

    log ρ_{i,t} = log π_θ(o_t | q, o_<t) − log π_θ_old(o_t | q, o_<t)       token level
    log ρ_{i}   = (1/|o_i|) Σ_t log ρ_{i,t}                                  sequence level (GSPO)
    ρ̂          = clip(ρ, 1 − ε_low, 1 + ε_high)                             (DAPO clip-higher)
    L_{i,t}     = − w_{i,t} · min(ρ A_i, ρ̂ A_i) + β · KL_{i,t}
    KL_{i,t}    = exp(ref − logp) − (ref − logp) − 1                        (k3 estimator)

where w is 1, or, for samples an engine drew, the truncated importance weight π_θ_old / μ
of trainer/sampling_correction.py (no gradient flows through it).

and the variants differ only in how L is reduced to a scalar, L = numerator / normaliser:

    grpo     Σ_i (token mean of L_i)   / sequences                        (DeepSeekMath)
    bnpo     Σ_{i,t} L_{i,t}           / tokens of this process's batch
    dr_grpo  Σ_{i,t} L_{i,t}           / (sequences · max_completion_length)   (Dr. GRPO)
    dapo     Σ_{i,t} L_{i,t}           / tokens of the global batch         (DAPO)

GSPO (sequence level) is defined as a mean over sequences of the sequence's clipped term
(Zheng et al. 2025, eq. 5), which is the ``grpo`` reduction; ``dapo``'s token sum would weight
each sequence by its length, so sequence level requires ``grpo``.

The normaliser counts the *whole* batch of an optimizer step (every micro-batch, every rank),
so gradient accumulation over micro-batches and DDP's gradient average reproduce the gradient
of one big batch: ``loss_normalizer`` computes it, ``policy_loss`` divides by it. Names and
definitions follow TRL's GRPOTrainer (``clip_ratio/low_mean`` etc.), so a user moving from TRL
reads the same numbers.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ImportanceSamplingLevel = Literal["token", "sequence"]


def loss_normalizer(loss_type: LossType, *, tokens: float, sequences: float,
                    max_completion_length: int | None = None, world: int = 1,
                    rank_tokens: float | None = None) -> float:
    """The denominator of one optimizer step's loss, as seen by one of ``world`` ranks.

    ``tokens`` and ``sequences`` count the global batch (all micro-batches, all ranks);
    ``rank_tokens`` this rank's share (bnpo normalises per process, as TRL does). DDP
    averages the ranks' gradients, i.e. divides their sum by ``world``: dividing the
    normaliser by ``world`` undoes that, so the result is the gradient of Σ / normaliser."""
    if loss_type == "bnpo":
        return max(tokens if rank_tokens is None else rank_tokens, 1.0)
    if loss_type == "dapo":
        value = max(tokens, 1.0)
    elif loss_type == "grpo":
        value = max(sequences, 1.0)
    elif loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("dr_grpo needs max_completion_length")
        value = max(sequences, 1.0) * max_completion_length
    else:
        raise ValueError(f"unknown loss_type {loss_type!r}")
    return value / world


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
    normalizer: float | None = None,  # from loss_normalizer; None: this batch alone
    sampling_weights: torch.Tensor | None = None,  # (B, T) or (B, 1) w; None: 1
) -> tuple[torch.Tensor, dict[str, float]]:
    if loss_type not in get_args(LossType):
        raise ValueError(f"unknown loss_type {loss_type!r}")
    if importance_sampling_level == "sequence" and loss_type != "grpo":
        raise ValueError(f"importance_sampling_level 'sequence' (GSPO) averages over sequences: "
                         f"loss_type must be 'grpo', got {loss_type!r}")
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise ValueError("dr_grpo needs max_completion_length")
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
    if sampling_weights is not None:
        per_token_loss = per_token_loss * sampling_weights  # w, as TRL: before the KL term

    metrics: dict[str, float] = {}
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("ref_logps is required when beta != 0")
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1  # (B, T), k3
        per_token_loss = per_token_loss + beta * kl
        metrics["kl"] = _masked_mean(kl.detach(), mask).item()

    if loss_type == "grpo":
        numerator = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).sum()
    else:
        numerator = (per_token_loss * mask).sum()
    if normalizer is None:
        normalizer = loss_normalizer(loss_type, tokens=float(mask.sum()),
                                     sequences=logps.shape[0],
                                     max_completion_length=max_completion_length)
    loss = numerator / max(normalizer, 1e-12)

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
