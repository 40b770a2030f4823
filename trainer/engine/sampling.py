"""A rollout drawn by an engine (``client.VLLMEngine``), shaped as HF ``generate``'s is
(``trainer.rollout.Rollout``): the same prompt encoding and truncation, the same masks and
``truncated`` flags, so the loss, the rewards and the metrics cannot tell which drew it,
plus each sampled token's log-prob under the engine."""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer.engine.client import Sample, VLLMEngine
from trainer.rollout import Prompt, Rollout, Sampling, encode_prompts
from trainer.seeds import DrawSeeds


def generate_on_engine(engine: VLLMEngine, tokenizer: PreTrainedTokenizerBase,
                       rows: list[dict[str, Any]], prompts: list[Prompt], sampling: Sampling,
                       eos_ids: list[int], greedy: bool = False,
                       seeds: DrawSeeds | None = None) -> Rollout:
    """G = ``sampling.num_generations`` completions per prompt, drawn from π/T by the
    engine, which stops a completion at any of ``eos_ids`` (kept, as HF keeps it), with the
    next of ``seeds``; ``greedy``: one, the most likely, per prompt (no seed)."""
    G = 1 if greedy else sampling.num_generations
    ids, mask, cut = encode_prompts(tokenizer, prompts, sampling.max_prompt_length)
    unpadded = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
    drawn = engine.generate(unpadded, n=G, max_tokens=sampling.max_completion_length,
                            stop_token_ids=eos_ids, temperature=sampling.temperature,
                            top_p=sampling.top_p, top_k=sampling.top_k, greedy=greedy,
                            seed=draw_seed(greedy, seeds))
    samples = [sample for group in drawn for sample in group]
    completion_ids, cmask, logps = _padded(samples, tokenizer.pad_token_id)
    eos = set(eos_ids)
    truncated = torch.tensor([not (s.token_ids and s.token_ids[-1] in eos) for s in samples])
    texts = tokenizer.batch_decode(completion_ids, skip_special_tokens=True)
    return Rollout(ids.repeat_interleave(G, 0), mask.repeat_interleave(G, 0), completion_ids,
                   cmask, truncated, texts, [row for row in rows for _ in range(G)],
                   cut.repeat_interleave(G), engine_logps=logps)


def draw_seed(greedy: bool, seeds: DrawSeeds | None) -> int | None:
    """The engine's seed for one draw: the next of the step's ``seeds`` (trainer/seeds.py),
    so a run's rollouts follow from its seed and step, not from what the engine, the update
    or another thread did before. A greedy draw (an evaluation) takes none, as HF's greedy
    ``generate`` takes none, so how often a run evaluates does not change what it trains
    on."""
    if greedy:
        return None
    if seeds is None:
        raise ValueError("a sampled draw takes its seed from the step's DrawSeeds "
                         "(trainer/seeds.py): pass seeds")
    return seeds.next()


def _padded(samples: list[Sample], pad_id: int
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, mask, log-probs), each (N, T), right-padded to the longest completion."""
    T = max(1, max(len(s.token_ids) for s in samples))
    ids = torch.full((len(samples), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), T), dtype=torch.long)
    logps = torch.zeros((len(samples), T), dtype=torch.float32)
    for k, sample in enumerate(samples):
        n = len(sample.token_ids)
        ids[k, :n] = torch.tensor(sample.token_ids, dtype=torch.long)
        mask[k, :n] = 1
        logps[k, :n] = torch.tensor(sample.logprobs, dtype=torch.float32)
    return ids, mask, logps
