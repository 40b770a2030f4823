"""Importance weights for samples drawn by another policy than the one the loss follows.

An engine samples with its own kernels and precision, and under asynchronous GRPO with
weights up to ``max_staleness`` updates old, so a token o_t was drawn from μ (the engine's
distribution), not from π_θ_old (the trainer's policy at the start of the step), which the
clipped objective assumes. Truncated importance sampling (Yao et al. 2025, "Your efficient
RL framework secretly brings you off-policy RL training"; TRL's
``vllm_importance_sampling_*``, veRL's TIS) weights each token's policy loss by

    w_{i,t} = π_θ_old(o_t | q, o_<t) / μ(o_t | q, o_<t)                     token modes
    w_i     = Π_t π_θ_old(o_t | ·) / μ(o_t | ·)                            sequence modes

kept within [C_min, C_max]: ``*_truncate`` clips w to it, ``*_mask`` sets w = 0 outside it
(the sample drops out of the loss). Modes, bounds and metric names are TRL's, so a run
moved from TRL reads the same numbers.
"""

from __future__ import annotations

from typing import Literal

import torch

ImportanceSamplingMode = Literal["token_truncate", "token_mask", "sequence_truncate",
                                 "sequence_mask"]


def sampling_weights(old_logps: torch.Tensor, engine_logps: torch.Tensor, mask: torch.Tensor,
                     mode: ImportanceSamplingMode, clip_min: float | None,
                     clip_max: float | None) -> tuple[torch.Tensor, dict[str, float]]:
    """The weights w, (B, T) for token modes or (B, 1) for sequence modes, and TRL's metrics
    of the gap between the two policies over ``mask`` (1: a token the policy sampled)."""
    mask = mask.to(old_logps.dtype)
    # log π_θ_old − log μ, 0 off the mask; a token the engine gave no finite log-prob
    # (NaN) weighs 1, as TRL has it, rather than turning the loss into NaN
    diff = torch.nan_to_num((old_logps - engine_logps) * mask, nan=0.0)
    sequence = mode.startswith("sequence")
    log_w = diff.sum(-1, keepdim=True) if sequence else diff
    w = torch.exp(log_w)
    if mode.endswith("truncate"):
        w = torch.clamp(w, min=clip_min, max=clip_max)
    else:
        low = -torch.inf if clip_min is None else clip_min
        high = torch.inf if clip_max is None else clip_max
        w = w.masked_fill((w < low) | (w > high), 0.0)
    sampled = mask.bool()
    gap = diff.abs()[sampled]
    ratios = w.flatten() if sequence else w[sampled]
    metrics = {
        "sampling/sampling_logp_difference/mean": _stat(gap, torch.mean),
        "sampling/sampling_logp_difference/max": _stat(gap, torch.max),
        "sampling/importance_sampling_ratio/min": _stat(ratios, torch.min),
        "sampling/importance_sampling_ratio/mean": _stat(ratios, torch.mean),
        "sampling/importance_sampling_ratio/max": _stat(ratios, torch.max),
    }
    return w, metrics


def _stat(values: torch.Tensor, reduce: object) -> float:
    return float(reduce(values)) if values.numel() else 0.0  # type: ignore[operator]
