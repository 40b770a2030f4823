"""Per-token log-probabilities of completion tokens under a model.

Under bf16 autocast the logits arrive in bf16, whose spacing near 16 is 0.0625: a log-prob
taken as ``logit − logsumexp`` in bf16, or returned in bf16 by ``log_softmax``, is off by up to
~0.06 nats, and the importance ratio exp(logp − old) by ~6%. Here each sequence's rows are
upcast to float32 one at a time (one (T, V) temporary, never a second (B, T, V) copy), and the
backward recomputes the softmax from the saved bf16 logits instead of keeping an fp32 copy.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from trainer.positions import position_ids, position_kwargs
from trainer.prefix import shared_prompt_logits


class _SelectedLogSoftmax(torch.autograd.Function):
    """log_softmax(logits / τ)[targets] in float32 (float64 if given), row by row."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor,  # type: ignore[override]
                temperature: float) -> torch.Tensor:
        acc = torch.promote_types(logits.dtype, torch.float32)
        out = torch.empty(targets.shape, dtype=acc, device=logits.device)  # (B, T)
        lse = torch.empty_like(out)  # (B, T)
        for b in range(logits.shape[0]):
            row = logits[b].to(acc, copy=True)  # (T, V): the only full-vocab temporary
            if temperature != 1.0:
                row.div_(temperature)
            lse[b] = torch.logsumexp(row, dim=-1)
            out[b] = row.gather(-1, targets[b].unsqueeze(-1)).squeeze(-1) - lse[b]
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature = temperature
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor  # type: ignore[override]
                 ) -> tuple[torch.Tensor, None, None]:
        logits, targets, lse = ctx.saved_tensors
        t = ctx.temperature
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for b in range(logits.shape[0]):
            # d logp_t / d z = (onehot(target) − softmax(z / τ)) / τ
            p = logits[b].to(lse.dtype, copy=True)  # (T, V) one temporary, reused in place
            p.div_(t).sub_(lse[b].unsqueeze(-1)).exp_()  # softmax
            g = grad_out[b].to(p.dtype).unsqueeze(-1)  # (T, 1)
            p.mul_(-g).scatter_add_(-1, targets[b].unsqueeze(-1), g)
            grad[b] = p.div_(t)
        return grad, None, None


def selective_log_softmax(logits: torch.Tensor, targets: torch.Tensor,
                          temperature: float = 1.0) -> torch.Tensor:
    """(B, T, V) logits, (B, T) targets → (B, T) float32 log-probs of the targets under
    softmax(logits / temperature)."""
    return _SelectedLogSoftmax.apply(logits, targets, temperature)


def completion_logits(
    model: PreTrainedModel | torch.nn.Module,
    input_ids: torch.Tensor,  # (B, P + T) prompt (left-padded) then completion
    attention_mask: torch.Tensor,  # (B, P + T)
    completion_length: int,  # T
    prompt_model: torch.nn.Module | None = None,
) -> torch.Tensor:
    """(B, T, V): the logits that predict each completion token. Rows with the same prompt
    (a GRPO group) share one pass over it (trainer.prefix); ``prompt_model`` runs that pass
    when ``model`` is a DDP wrapper, None to always run whole sequences."""
    logits = None
    if prompt_model is not None:
        logits = shared_prompt_logits(model, prompt_model, input_ids, attention_mask,
                                      completion_length)  # (B, T, V)
    if logits is None:
        # logits for positions P-1 .. P+T-2 predict the completion tokens P .. P+T-1
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                       logits_to_keep=completion_length + 1,
                       **position_kwargs(model, position_ids(attention_mask))
                       ).logits[:, :-1, :]  # (B, T, V)
    return logits


def completion_logps(
    model: PreTrainedModel | torch.nn.Module,
    input_ids: torch.Tensor,  # (B, P + T) prompt (left-padded) then completion
    attention_mask: torch.Tensor,  # (B, P + T)
    completion_length: int,  # T
    temperature: float = 1.0,
    prompt_model: torch.nn.Module | None = None,
) -> torch.Tensor:
    """(B, T) float32: log π(o_t | q, o_<t) for each completion token, at the sampling
    temperature (the distribution the tokens were drawn from, as TRL does)."""
    logits = completion_logits(model, input_ids, attention_mask, completion_length,
                               prompt_model)
    targets = input_ids[:, -completion_length:]  # (B, T)
    return selective_log_softmax(logits, targets, temperature)
