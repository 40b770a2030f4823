"""Steps 1-2 of the GRPO loop: a step's prompts to scored rollouts.

Rollouts are drawn by the policy's own ``generate`` (chunk by chunk, each chunk scored on
the reward server while the next one is generated) or by an engine (the whole step in one
call: the engine batches it itself; its chunks are then scored in parallel). DAPO's dynamic
sampling replaces zero-std groups with fresh prompts. The trainer runs this in its own
thread, or, with ``max_staleness > 0``, a thread ahead of it does (trainer/ahead.py); either
way the engine's draws for step s take the seeds of step s (trainer/seeds.py), so which
thread drew them, and when, changes nothing they draw.
"""

from __future__ import annotations

import time
import warnings
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.advantages import group_advantages
from trainer.config import OVERLONG, GRPOConfig
from trainer.data import PromptStream, Row
from trainer.engine.colocated import ColocatedEngine
from trainer.multiturn import ToolUse, generate_with_tools, without_outages
from trainer.rewards import ScoredBatch, Scorer
from trainer.rollout import Prompt, Rollout, Sampling, format_prompt, generate, pad_and_stack
from trainer.seeds import DrawSeeds
from trainer.shaping import overlong_penalties


@dataclass
class SampledBatch:
    """One step's scored rollouts, and what drew them."""

    rollout: Rollout
    scored: ScoredBatch
    timing: dict[str, float]  # time/generate, time/reward_wait, resample_rounds, dropped_groups
    version: int = 0  # optimizer steps the weights that drew it had taken
    stream_position: int = 0  # the prompt stream's position once it was drawn


class RolloutSampler:
    """Draws and scores a step's rollouts with ``policy`` or ``engine``."""

    def __init__(self, config: GRPOConfig, tokenizer: PreTrainedTokenizerBase,
                 policy: PreTrainedModel, stream: PromptStream, scorer: Scorer,
                 sampling: Sampling, tool_use: ToolUse | None, engine: ColocatedEngine | None,
                 autocast: Any, is_main: bool, rank: int = 0) -> None:
        """``rank``: with ``config.seed``, what the engine's seeds derive from (each rank
        draws its own samples)."""
        self.config, self.tokenizer, self.policy = config, tokenizer, policy
        self.stream, self.scorer, self.sampling = stream, scorer, sampling
        self.tool_use, self.engine, self.is_main = tool_use, engine, is_main
        self.rank = rank
        self._autocast = autocast  # () -> the trainer's autocast context
        self._warned_cut = False

    def prompts(self, rows: list[Row]) -> list[Prompt]:
        c = self.config
        tools = self.tool_use.format.tools() if self.tool_use else None
        return [format_prompt(r, self.tokenizer, c.prompt_column, c.system_prompt,
                              c.use_chat_template, c.prompt_suffix, tools) for r in rows]

    def seeds(self, step: int) -> DrawSeeds:
        """The seeds of step ``step``'s engine draws on this rank."""
        return DrawSeeds(self.config.seed, self.rank, step)

    def generate(self, rows: list[Row], greedy: bool = False,
                 tool_use: ToolUse | None = None, seeds: DrawSeeds | None = None) -> Rollout:
        """Completions of ``rows``: single-turn, or with the code tool (trainer/multiturn.py;
        ``tool_use``: another client of it than the run's, whose sessions are its own).
        ``seeds``: the step's, for an engine's sampled draws (``generate`` draws from
        torch's generator)."""
        tool_use = tool_use or self.tool_use
        if self.engine is not None:
            return self.engine.generate(rows, self.prompts(rows), self.sampling, greedy,
                                        tool_use, seeds)
        context: AbstractContextManager[Any] = self._autocast()
        with context:
            if tool_use is not None:
                return generate_with_tools(self.policy, self.tokenizer, rows, self.prompts(rows),
                                           self.sampling, tool_use, greedy)
            return generate(self.policy, self.tokenizer, rows, self.prompts(rows),
                            self.sampling)

    def sample(self, rows: list[Row], seeds: DrawSeeds | None = None
               ) -> tuple[Rollout, ScoredBatch, float, float]:
        """The rollouts of ``rows`` and their rewards, and the seconds spent generating and
        waiting for rewards. With ``generate`` each chunk is scored while the next one is
        generated; an engine draws all of them in one call, with the next of ``seeds``."""
        c = self.config
        step = len(rows) if self.engine is not None else c.generation_chunk
        rollouts, futures = [], []
        t_generate = 0.0
        if self.engine is None:  # drawing ahead, the update is using the policy meanwhile
            self.policy.eval()
        size = c.generation_chunk * c.num_generations  # completions per reward call
        for start in range(0, len(rows), step):
            t0 = time.perf_counter()
            rollout = self.generate(rows[start : start + step], seeds=seeds)
            t_generate += time.perf_counter() - t0 - rollout.tool_seconds
            self._warn_cut(rollout)
            rollouts.append(rollout)
            truncated = rollout.truncated.tolist()
            for k in range(0, len(rollout.texts), size):  # whole groups: size is G's multiple
                futures.append(self.scorer.submit(
                    rollout.texts[k : k + size], rollout.rows[k : k + size],
                    c.num_generations, truncated[k : k + size]))
        t0 = time.perf_counter()
        scored = ScoredBatch.concat([f.result() for f in futures])  # a failure raises, loudly
        t_wait = time.perf_counter() - t0
        rollout = pad_and_stack(rollouts, self.tokenizer.pad_token_id)
        return rollout, self._shape(without_outages(scored, rollout), rollout), t_generate, t_wait

    def sample_batch(self, step: int) -> SampledBatch:
        """Steps 1-2 of step ``step``, with DAPO dynamic sampling: zero-std groups are
        dropped and replaced by fresh prompts, up to ``max_resample_rounds`` rounds."""
        c = self.config
        seeds = self.seeds(step)
        rollout, scored, t_gen, t_wait = self.sample(self.stream.take(c.prompts_per_step),
                                                     seeds)
        info = {"resample_rounds": 0.0, "dropped_groups": 0.0}
        if c.dynamic_sampling:
            rollout, scored, t_gen, t_wait = self._resample(rollout, scored, t_gen, t_wait, info,
                                                            seeds)
        timing = {"time/generate": t_gen, "time/reward_wait": t_wait, **info}
        return SampledBatch(rollout, scored, timing, stream_position=self.stream.position)

    def _resample(self, rollout: Rollout, scored: ScoredBatch, t_gen: float, t_wait: float,
                  info: dict[str, float], seeds: DrawSeeds
                  ) -> tuple[Rollout, ScoredBatch, float, float]:
        c = self.config
        G = c.num_generations
        kept_r, kept_s = [], []
        for round_ in range(c.max_resample_rounds + 1):
            _, stats = group_advantages(torch.tensor(scored.rewards), G, c.scale_rewards)
            keep = (~stats.zero_std).nonzero().flatten().tolist()
            info["dropped_groups"] += float(stats.zero_std.sum())
            if keep:
                index = [g * G + i for g in keep for i in range(G)]
                kept_r.append(rollout.select(index))
                kept_s.append(scored.select(index))
            have = sum(len(r.texts) for r in kept_r) // G
            if have >= c.prompts_per_step or round_ == c.max_resample_rounds:
                break
            info["resample_rounds"] += 1
            rollout, scored, g2, w2 = self.sample(self.stream.take(c.prompts_per_step - have),
                                                  seeds)
            t_gen, t_wait = t_gen + g2, t_wait + w2
        if not kept_r:  # every group was zero-std: train on the last one (advantages are 0)
            kept_r, kept_s = [rollout], [scored]
        rollout = pad_and_stack(kept_r, self.tokenizer.pad_token_id)
        scored = ScoredBatch.concat(kept_s)
        limit = c.prompts_per_step * G
        if len(rollout.texts) > limit:
            rollout = rollout.select(list(range(limit)))
            scored = scored.select(list(range(limit)))
        return rollout, scored, t_gen, t_wait

    def _shape(self, scored: ScoredBatch, rollout: Rollout) -> ScoredBatch:
        """The verifiers' rewards plus the terms that need token counts, which only the
        trainer has: DAPO's overlong penalty (``overlong_buffer``; trainer/shaping.py)."""
        buffer = self.config.overlong_buffer
        if buffer is None:
            return scored
        lengths = rollout.completion_mask.sum(1).tolist()  # through the EOS, as veRL counts
        return scored.with_term(OVERLONG, buffer.penalty_factor, overlong_penalties(
            lengths, self.config.overlong_max_length, buffer.len))

    def _warn_cut(self, rollout: Rollout) -> None:
        if rollout.prompt_cut.any() and not self._warned_cut and self.is_main:
            warnings.warn(f"prompts longer than max_prompt_length={self.config.max_prompt_length}"
                          " tokens lose their start (the metric prompt_cut_fraction counts "
                          "them); raise max_prompt_length to keep them whole", stacklevel=4)
            self._warned_cut = True

