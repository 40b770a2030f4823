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

With top-k or top-p the engine draws from, and gives the log-probs of, π/T renormalised over
the tokens the truncation keeps; against the trainer's π/T over the whole vocabulary every
ratio would carry the kept mass S_t < 1 (TRL's open issue 6789), and a sequence weight their
product (0.9 a token over 200 tokens: 7e-10). So π_θ_old is put on the same support first:
log π_θ_old − log S_t (``kept_log_mass``, the sampler's own rule replayed on the trainer's
logits).
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


def on_sampled_support(old_logps: torch.Tensor, kept: torch.Tensor | None) -> torch.Tensor:
    """log π_θ_old renormalised over the tokens truncated sampling kept, as the engine's μ
    is: log π_θ_old − log S_t (``kept``: ``kept_log_mass``; None: nothing was cut)."""
    return old_logps if kept is None else old_logps - kept


def truncates(top_k: int, top_p: float) -> bool:
    """Whether sampling keeps only part of the vocabulary."""
    return top_k > 0 or top_p < 1.0


@torch.no_grad()
def kept_log_mass(logits: torch.Tensor, temperature: float, top_k: int, top_p: float
                  ) -> torch.Tensor:
    """(B, T, V) logits → (B, T) float32 log S_t: the log of the mass softmax(logits / τ)
    puts on the tokens that top-k, then top-p over what top-k kept, leave to sample from.
    The rule is vLLM's and HF's (sort ascending; drop while the cumulative mass is at most
    1 − p; keep at least the top token). Row by row: one (T, V) temporary."""
    out = torch.zeros(logits.shape[:2], dtype=torch.float32, device=logits.device)
    if not truncates(top_k, top_p):
        return out
    for b in range(logits.shape[0]):
        row = logits[b].float() / temperature  # (T, V)
        ordered = row.sort(dim=-1).values  # ascending
        if 0 < top_k < row.shape[-1]:
            kth = ordered[:, -top_k : -top_k + 1]  # (T, 1)
            ordered = ordered.masked_fill(ordered < kth, -torch.inf)
        if top_p < 1.0:
            cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
            dropped = cumulative <= 1 - top_p
            dropped[:, -1] = False
            ordered = ordered.masked_fill(dropped, -torch.inf)
        out[b] = torch.logsumexp(ordered, dim=-1) - torch.logsumexp(row, dim=-1)
    return out
