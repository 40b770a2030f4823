"""The GRPO loop, in algorithm order (DeepSeekMath 2024, Algorithm 1, outcome supervision):

    for each step:
        1. take a batch of prompts (this rank's shard)
        2. sample G completions per prompt and score them on the reward server
           (trainer/sampler.py); with max_staleness > 0 a thread draws them ahead, while
           the updates before run (trainer/ahead.py)
        3. wait for the rewards; group-relative advantages
        4. log-probs at sampling time (μ > 1, or an engine drew: its importance weights) and
           of the reference model (β > 0)
        5. μ optimisation passes of the clipped objective over micro-batches, one optimizer
           step per pass (gradient accumulation, clipping, LR schedule with warm-up)
        6. metrics, checkpoint, evaluation
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from transformers import PreTrainedModel, PreTrainedTokenizerBase, get_scheduler

from reward_server.client import RewardClient, RewardClientError
from reward_server.rollout_log import FILE, RolloutLog
from reward_server.tool_client import CodeTool
from trainer import checkpoint, distributed, lora
from trainer.advantages import (
    GroupStats,
    as_rewards,
    group_advantages,
    nan_mean,
    nan_std,
    reward_moments,
    std_from_moments,
)
from trainer.ahead import AheadSampler
from trainer.config import GRPOConfig
from trainer.data import PromptStream, Row
from trainer.engine.client import EngineError, VLLMEngine
from trainer.engine.colocated import ColocatedEngine
from trainer.engine.weights import check_adapters_syncable
from trainer.interrupt import Terminated, hold_sigterm, sigterm_count
from trainer.logprobs import completion_logits, selective_log_softmax
from trainer.loss import loss_normalizer, policy_loss
from trainer.metrics import RunLogger
from trainer.models import (
    MASTER_DTYPE,
    disable_dropout,
    prepare_policy,
    prepare_tokenizer,
    reference_model,
)
from trainer.multiturn import ToolUse
from trainer.rewards import RewardScorer, ScoredBatch, Scorer, close_scorer
from trainer.rollout import Rollout, Sampling, eos_token_ids, greedy_texts
from trainer.sampler import RolloutSampler, SampledBatch
from trainer.sampling_correction import (
    kept_log_mass,
    on_sampled_support,
    sampling_weights,
    truncates,
)
from trainer.tools import call_format


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(config: GRPOConfig) -> tuple[torch.device, torch.dtype]:
    """The device, and the *compute* dtype (autocast); weights stay float32."""
    if config.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(config.device)
    if device.type == "cuda" and dist.is_initialized():
        device = torch.device("cuda", torch.cuda.current_device())
    if config.dtype == "auto":
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    else:
        dtype = getattr(torch, config.dtype)
    return device, dtype


class GRPOTrainer:
    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        train_rows: Sequence[Row],
        config: GRPOConfig,
        reward_client: RewardClient | None,
        eval_rows: Sequence[Row] | None = None,
        ref_model: PreTrainedModel | None = None,
        scorer: Scorer | None = None,
        engine: VLLMEngine | None = None,
    ) -> None:
        """``reward_client`` scores through the server; a ``scorer`` (e.g. FunctionScorer)
        replaces it. ``engine``: a started vLLM engine to sample with (``rollout_engine:
        vllm``), given this policy's weights now; by default the trainer starts its own."""
        self.config = config
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.is_main = self.rank == 0
        self.device, self.dtype = resolve_device(config)
        # Each rank draws its own completions (accelerate's device_specific seeding): with one
        # seed, two ranks' samples for different prompts agree on most tokens.
        seed_everything(config.seed + self.rank)
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.policy = prepare_policy(model, self.device, config.gradient_checkpointing)
        if config.disable_dropout:  # before the adapter: lora_dropout stays what it is set to
            disable_dropout(self.policy)
        if config.lora_r:
            self.policy = lora.add_adapter(self.policy, config.lora_r, config.lora_alpha,
                                           config.lora_dropout, config.lora_target_modules)
        # β = 0: no reference model in memory at all (TRL does the same); with LoRA the
        # reference is the base under the adapter (reference_logps)
        self.ref_model = (reference_model(self.policy, self.device, ref_model)
                          if config.beta > 0 and not config.lora_r else None)
        self.model = self._wrap(self.policy)
        # a group's prompt run once (trainer.prefix); not under FSDP, where every rank must run
        # the same forwards and whether a batch can share depends on its data
        self.share_prompts = config.share_prompts and not distributed.is_sharded(self.model)
        # float32 parameters and states; one kernel over all parameters (no per-step
        # temporaries). No GradScaler: bf16 has float32's exponent range.
        self.optimizer = torch.optim.AdamW(
            decay_groups(self.policy, config.weight_decay),
            lr=config.learning_rate, weight_decay=config.weight_decay,
            betas=(config.adam_beta1, config.adam_beta2), fused=True)
        total_updates = config.max_steps * config.num_iterations
        self.scheduler = get_scheduler(
            "constant_with_warmup" if config.lr_scheduler == "constant" else config.lr_scheduler,
            self.optimizer, num_warmup_steps=config.warmup_steps,
            num_training_steps=total_updates)
        self.stream = PromptStream(train_rows, config.seed, self.rank, self.world)
        self.eval_rows = list(eval_rows or [])[: config.eval_samples]
        if scorer is None:
            if reward_client is None:
                raise ValueError("GRPOTrainer needs a reward_client or a scorer")
            log = None
            if config.log_rollouts:
                name = FILE if self.rank == 0 else f"rollouts-rank{self.rank}.jsonl"
                log = RolloutLog(Path(config.output_dir) / name)
            scorer = RewardScorer(config.rewards, reward_client, log=log)
        self.scorer = scorer
        self.run_dir = Path(config.output_dir)
        self.step = 0
        self.sampling = Sampling(config.num_generations, config.max_prompt_length,
                                 config.max_completion_length, config.temperature,
                                 config.top_p, config.top_k, self.share_prompts)
        self.tool_use = self._tool_use() if config.code_tool else None
        # evaluation's rollouts get a client of their own: drawing ahead, they run while the
        # training rollouts do, and a session is its client's (ids, and closing them all)
        self.eval_tool_use = self._tool_use() if config.code_tool else None
        self._owns_engine = engine is None
        self.engine: ColocatedEngine | None = None
        try:  # an engine that cannot start on one rank stops every rank, each with a line
            with self._together():
                self.engine = self._engine(engine) if config.rollout_engine == "vllm" else None
        except RankFailure:
            if self.engine is not None and self._owns_engine:
                self.engine.close()
            raise
        self.sampler = RolloutSampler(config, self.tokenizer, self.policy, self.stream,
                                      self.scorer, self.sampling, self.tool_use, self.engine,
                                      self.autocast, self.is_main, self.rank)
        self.ahead: AheadSampler | None = None  # drawing ahead (max_staleness > 0)
        self._position = 0  # the prompt stream's position after the last trained step
        # between a step's first optimizer step and its end the policy is half-way: an
        # interrupt there leaves nothing a checkpoint could be made of
        self._mid_update = False
        self._rng_at_step_start: dict[str, Any] | None = None  # inside a step
        self._saved_step = 0  # the step of the newest checkpoint (0: none yet)
        self._interrupted = False  # Ctrl-C or SIGTERM: nothing is waited for on the way out

    def _tool_use(self) -> ToolUse:
        c = self.config
        tool = CodeTool(c.tool_url or c.reward_url[0], state=c.tool_state, token=c.reward_token,
                        run_timeout_s=c.tool_run_timeout_s,
                        request_timeout_s=c.tool_request_timeout_s,
                        max_output_chars=c.max_tool_output_chars, concurrency=c.tool_concurrency)
        return ToolUse(tool, call_format(c.tool_format, self.tokenizer), c.max_tool_turns)

    def _engine(self, engine: VLLMEngine | None) -> ColocatedEngine:
        check_adapters_syncable(self.policy)
        eos_ids = eos_token_ids(self.policy, self.tokenizer)
        if engine is not None:
            return ColocatedEngine(engine, self.policy, self.tokenizer, eos_ids)
        return ColocatedEngine.start(self.config, self.config.seed + self.rank, self.dtype,
                                     self.policy, self.tokenizer, eos_ids, self.rank)

    def _wrap(self, policy: torch.nn.Module) -> torch.nn.Module:
        """The module the update runs through: DDP or FSDP over the ranks, or the policy."""
        if self.world == 1:
            return policy
        return distributed.wrap(policy, self.config.distributed, self.device)

    def autocast(self) -> AbstractContextManager[Any]:
        """bf16 compute over float32 master weights (TRL with bf16=True does the same)."""
        if self.dtype == MASTER_DTYPE:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    # --- 1-3: sampling and rewards (trainer/sampler.py, trainer/ahead.py) ------------------

    def close(self) -> None:
        """Stops drawing ahead, and closes what the trainer opened: the scorer's threads, the
        tool's client, the engine it started; each of them whatever the others raise.
        ``train`` calls it; a loop of ``training_step`` calls ends with it."""
        owned = self.engine if self._owns_engine else None
        with ExitStack() as stack:  # its callbacks run last first
            if owned is not None:
                stack.callback(owned.close)
            for tool_use in (self.tool_use, self.eval_tool_use):
                if tool_use is not None:
                    stack.callback(tool_use.tool.close)
            # interrupted: a reward request in flight is ended, not waited for
            stack.callback(close_scorer, self.scorer, not self._interrupted)
            # an engine given to the trainer outlives it: it is left with the trained policy
            stack.callback(self._stop_drawing, not self._interrupted,
                           not self._interrupted and not self._owns_engine)
            if owned is not None and self._interrupted:  # a second Ctrl-C cut interrupted()
                stack.callback(owned.close, False)

    def _stop_drawing(self, wait: bool = True, hand_over: bool = False) -> None:
        if self.ahead is not None:
            ahead, self.ahead = self.ahead, None
            ahead.close(wait, hand_over)

    def interrupted(self) -> None:
        """Ctrl-C or SIGTERM: the engine this trainer started is ended first, without
        handing it weights (a draw in flight would be waited for up to
        ``vllm_request_timeout_s``), drawing ahead stops without waiting, and on one rank,
        with the policy between two steps, the last completed step is saved if it is not
        yet (a SIGTERM in an update waits for its end). Not with several ranks: a
        checkpoint needs them all, so SIGTERM is held for the end of the step, where they
        save together (``train``); what reaches here interrupted each rank wherever it
        stood."""
        self._interrupted = True
        if self.engine is not None and self._owns_engine:
            self.engine.close(wait=False)
        self._stop_drawing(wait=False)
        if self.world == 1 and not self._mid_update and self.step > self._saved_step:
            self.save()

    def _next_batch(self) -> SampledBatch:
        """This step's scored rollouts: drawn now, or, drawing ahead, waited for."""
        if self.config.max_staleness and self.ahead is None:
            assert self.engine is not None  # the config asks for one
            self.ahead = AheadSampler(self.sampler, self.engine, self.config.max_staleness,
                                      start=self.step, until=self.config.max_steps)
        if self.ahead is not None:
            return self.ahead.next_batch()
        batch = self.sampler.sample_batch(self.step)
        batch.version = self.step
        return batch

    # --- 4: log-probs ----------------------------------------------------------------------

    @torch.no_grad()
    def _logps_no_grad(self, model: torch.nn.Module, batch: UpdateBatch,
                       kept: torch.Tensor | None = None) -> torch.Tensor:
        """(N, T) log-probs without a graph, over the same micro-batches as the update (the
        same numerics: ratios are exactly 1 before the first update); 0 past a row's end.
        ``kept``, (N, T): filled with the log kept mass of truncated sampling (top-k/p)."""
        c = self.config
        out = torch.zeros(batch.loss_mask.shape, dtype=torch.float32, device=self.device)
        for sl in batch.slices(c.micro_batch_size):
            part = batch.micro(sl)
            logits, out[sl, : part.T] = self._forward(model, part)
            if kept is not None:
                kept[sl, : part.T] = kept_log_mass(logits, c.temperature, c.top_k, c.top_p)
        return out

    def _forward(self, model: torch.nn.Module, part: UpdateBatch
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """A micro-batch's completion logits (B, T, V) and their tokens' log-probs (B, T) at
        the sampling temperature; the logits also give truncated sampling's kept mass."""
        with self.autocast():
            logits = completion_logits(model, part.ids, part.attn, part.T,
                                       self._prompt_model(model))
            return logits, selective_log_softmax(logits, part.ids[:, -part.T :],
                                                 self.config.temperature)

    def reference_logps(self, batch: UpdateBatch) -> torch.Tensor:
        """Log-probs of the reference policy: the frozen copy, or with LoRA the policy's own
        base weights with the adapter switched off."""
        if self.ref_model is not None:
            return self._logps_no_grad(self.ref_model, batch)
        with lora.reference(self.policy):
            return self._logps_no_grad(self.policy, batch)

    def _prompt_model(self, model: torch.nn.Module) -> torch.nn.Module | None:
        """What runs a group's shared prompt pass (trainer.prefix); None: whole sequences."""
        return distributed.unwrapped(model) if self.share_prompts else None

    def _correct_sampling(self, batch: UpdateBatch) -> dict[str, float]:
        """Samples an engine drew: its log-probs μ against the policy's at the step's start
        π_θ_old (kernels and precision differ; drawing ahead, its weights are older), and
        the truncated importance weights π_θ_old/μ for the loss, unless switched off."""
        c = self.config
        assert batch.engine_logps is not None and batch.old_logps is not None
        assert batch.sampled is not None
        weights, metrics = sampling_weights(
            on_sampled_support(batch.old_logps, batch.kept_log_mass), batch.engine_logps,
            batch.sampled, c.vllm_importance_sampling_mode,
            c.vllm_importance_sampling_clip_min, c.vllm_importance_sampling_clip_max)
        if c.vllm_importance_sampling_correction:
            batch.sampling_weights = weights
        return metrics

    def _part_weights(self, part: UpdateBatch, logps: torch.Tensor,
                      kept: torch.Tensor | None) -> torch.Tensor | None:
        """μ = 1: π_θ_old is the pass's own log-probs (the same weights, the same
        micro-batch), so a micro-batch's importance weights come from its forward, with no
        forward of their own."""
        c = self.config
        assert part.engine_logps is not None and part.sampled is not None
        weights, _ = sampling_weights(
            on_sampled_support(logps.detach(), kept), part.engine_logps, part.sampled,
            c.vllm_importance_sampling_mode, c.vllm_importance_sampling_clip_min,
            c.vllm_importance_sampling_clip_max)
        return weights if c.vllm_importance_sampling_correction else None

    # --- 5: the update ---------------------------------------------------------------------

    def advantages(self, rewards: torch.Tensor) -> tuple[torch.Tensor, GroupStats]:
        """Group-relative advantages; ``scale_rewards: batch`` divides by the std of every
        rank's rewards (TRL gathers them), not this rank's alone."""
        c = self.config
        batch_std = None
        if c.scale_rewards == "batch" and self.world > 1:
            moments = reward_moments(rewards).to(self.device)
            dist.all_reduce(moments)
            batch_std = std_from_moments(moments.cpu())
        return group_advantages(rewards, c.num_generations, c.scale_rewards,
                                batch_std=batch_std)

    def normalizer(self, loss_mask: torch.Tensor) -> float:
        """The loss's denominator for this optimizer step (trainer/loss.py), from the counts of
        the whole batch: every micro-batch, every rank."""
        c = self.config
        local = torch.tensor([float(loss_mask.sum()), float(loss_mask.shape[0])],
                             dtype=torch.float64, device=self.device)
        counts = local.clone()
        if self.world > 1:
            dist.all_reduce(counts)
        return loss_normalizer(c.loss_type, tokens=float(counts[0]), sequences=float(counts[1]),
                               max_completion_length=c.max_completion_length, world=self.world,
                               rank_tokens=float(local[0]))

    def accumulate_gradients(self, batch: UpdateBatch, normalizer: float
                             ) -> tuple[float, dict[str, float]]:
        """Forward and backward over micro-batches; the gradients add up to the gradient of
        the whole batch's loss (the normaliser counts the whole batch). Returns the loss and
        the micro-batch metrics, averaged by sequences."""
        c = self.config
        N = batch.ids.shape[0]
        slices = batch.slices(c.micro_batch_size)
        total, sums = 0.0, {}
        # an engine drew the batch and π_θ_old is not known yet (μ = 1): this pass's
        # log-probs are it, kept for the step's metrics
        own_old = batch.engine_logps is not None and batch.old_logps is None
        seen = torch.zeros_like(batch.loss_mask) if own_old else None
        for k, sl in enumerate(slices):
            part = batch.micro(sl)
            skip_sync = self.world > 1 and k < len(slices) - 1  # DDP all-reduces the last
            with distributed.accumulating(self.model, skip_sync):
                logits, logps = self._forward(self.model, part)
                weights = part.sampling_weights
                if seen is not None:
                    seen[sl, : part.T] = logps.detach()
                    kept = None
                    if batch.kept_log_mass is not None:
                        kept = kept_log_mass(logits, c.temperature, c.top_k, c.top_p)
                        batch.kept_log_mass[sl, : part.T] = kept
                    weights = self._part_weights(part, logps, kept)
                loss, m = policy_loss(
                    logps, part.old_logps, part.ref_logps, part.advantages, part.loss_mask,
                    loss_type=c.loss_type, epsilon_low=c.epsilon_low,
                    epsilon_high=c.epsilon_high_value, beta=c.beta,
                    importance_sampling_level=c.importance_sampling_level,
                    max_completion_length=c.max_completion_length, normalizer=normalizer,
                    sampling_weights=weights)
                loss.backward()
            total += float(loss.detach())
            weight = part.ids.shape[0] / N
            for key, value in m.items():
                sums[key] = sums.get(key, 0.0) + value * weight
        if seen is not None:
            batch.old_logps = seen
        return total, sums

    def training_step(self) -> dict[str, Any]:
        c = self.config
        t_step = time.perf_counter()
        # a checkpoint saved before this step ends (an interrupt, a failure) is of the last
        # step, so its RNG states are those this step started from, not what its draws
        # left: a resume from it draws this step again as the uninterrupted run did
        self._rng_at_step_start = checkpoint.rng_state()
        with self._together():
            sampled = self._next_batch()
        rollout, scored, timing = sampled.rollout, sampled.scored, dict(sampled.timing)
        timing["sampling/staleness"] = float(self.step - sampled.version)

        rewards = torch.tensor(scored.rewards, dtype=torch.float32)
        advantages, stats = self.advantages(rewards)

        ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], 1).to(self.device)
        attn = torch.cat([rollout.prompt_mask, rollout.completion_mask], 1).to(self.device)
        T = rollout.completion_ids.shape[1]
        loss_mask = rollout.completion_mask.clone().float()
        if rollout.tool_mask is not None:
            loss_mask *= rollout.tool_mask  # a tool's output: no loss, no KL (TRL, ToRL)
        if c.mask_truncated_completions:
            loss_mask[rollout.truncated] = 0.0  # DAPO overlong filtering
        loss_mask = loss_mask.to(self.device)

        t_train = time.perf_counter()
        self.policy.train()
        batch = UpdateBatch(ids, attn, T, loss_mask, advantages.to(self.device))
        if rollout.engine_logps is not None:
            batch.engine_logps = rollout.engine_logps.to(self.device)
            drawn = rollout.completion_mask.float()
            if rollout.tool_mask is not None:
                drawn *= rollout.tool_mask  # a tool's tokens were not sampled
            batch.sampled = drawn.to(self.device)
            if truncates(c.top_k, c.top_p):  # the engine's μ is over the kept tokens
                batch.kept_log_mass = torch.zeros_like(loss_mask)
        if c.num_iterations > 1:
            batch.old_logps = self._logps_no_grad(self.policy, batch, batch.kept_log_mass)
        if c.beta > 0:
            batch.ref_logps = self.reference_logps(batch)
        if batch.engine_logps is not None and batch.old_logps is not None:
            timing.update(self._correct_sampling(batch))  # μ > 1: the weights before the passes
        normalizer = self.normalizer(loss_mask)
        sums: dict[str, float] = {}
        losses, grad_norms = [], []
        self._mid_update = True
        came = sigterm_count()
        if self.world == 1:  # a SIGTERM waits for the update's end, and that step is saved
            hold_sigterm(True)
        for _ in range(c.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            loss, metrics = self.accumulate_gradients(batch, normalizer)
            for key, value in metrics.items():
                sums[key] = sums.get(key, 0.0) + value / c.num_iterations
            grad_norms.append(distributed.clip_grad_norm(self.policy.parameters(),
                                                         c.max_grad_norm))
            self.optimizer.step()
            self.scheduler.step()
            losses.append(loss)
        if batch.engine_logps is not None and c.num_iterations == 1:
            timing.update(self._correct_sampling(batch))  # the first pass's π_θ_old: metrics
        self.step += 1
        self._position = sampled.stream_position
        self._rng_at_step_start = None  # the step is done: a save takes the RNG as it is
        self._mid_update = False
        if self.world == 1:
            hold_sigterm(False)
            if sigterm_count() > came:
                raise Terminated
        # the next step samples the new policy (once: the μ passes sample nothing)
        t_sync = time.perf_counter()
        with self._together():
            if self.ahead is not None:
                self.ahead.publish(self.step)  # a copy now; the engine takes it between batches
            elif self.engine is not None:
                self.engine.sync()
        if self.engine is not None:
            timing["time/weight_sync"] = time.perf_counter() - t_sync
        t_end = time.perf_counter()
        return self._metrics(rollout, scored, rewards, advantages, stats, timing, sums, losses,
                             grad_norms, t_step, t_train, t_end)

    def _metrics(self, rollout: Rollout, scored: ScoredBatch, rewards: torch.Tensor,
                 advantages: torch.Tensor, stats: GroupStats, timing: dict[str, float],
                 sums: dict[str, float], losses: list[float], grad_norms: list[float],
                 t_step: float, t_train: float, t_end: float) -> dict[str, Any]:
        lengths = rollout.completion_mask.sum(1).float()
        step_time = t_end - t_step
        out: dict[str, Any] = {
            "reward": nan_mean(rewards), "reward_std": nan_std(rewards),
            "accuracy": float(np.mean(scored.correct)),
            "advantages/mean": float(advantages.mean()), "advantages/std": float(advantages.std()),
            "advantages/min": float(advantages.min()), "advantages/max": float(advantages.max()),
            "frac_reward_zero_std": float(stats.zero_std.float().mean()),
            "completion_length": float(lengths.mean()),
            "completion_length_max": float(lengths.max()),
            "truncated_fraction": float(rollout.truncated.float().mean()),
            "prompt_cut_fraction": float(rollout.prompt_cut.float().mean()),
            "tokens_per_s": float(lengths.sum()) / step_time,
            "loss": float(np.mean(losses)), "grad_norm": float(np.mean(grad_norms)),
            "learning_rate": self.scheduler.get_last_lr()[0],
            "time/train": t_end - t_train, "time/step": step_time,
            "reward_wait_share": timing["time/reward_wait"] / step_time,
            **timing, **sums,
        }
        if rollout.tool_stats is not None:
            out.update(_tool_metrics(rollout))
        for name, values in scored.per_verifier.items():
            scores = as_rewards(values)
            out[f"rewards/{name}/mean"] = nan_mean(scores)
            out[f"rewards/{name}/std"] = nan_std(scores)
            out[f"rewards/{name}/unscorable_rate"] = float(torch.isnan(scores).float().mean())
        if self.world > 1:
            out = _average_over_ranks(out, self.device)
        return out

    # --- evaluation --------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Greedy completions on the held-out prompts, scored by the reward server."""
        if not self.eval_rows:
            return {}
        self.policy.eval()
        texts: list[str] = []
        for start in range(0, len(self.eval_rows), 16):
            rows = self.eval_rows[start : start + 16]
            if self.tool_use is not None or self.engine is not None:
                if self.ahead is not None:
                    self.ahead.sync_now()  # the policy as it is, not the one drawing ahead
                texts += self.sampler.generate(rows, True, self.eval_tool_use).texts
                continue
            with self.autocast():
                texts += greedy_texts(self.policy, self.tokenizer, self.sampler.prompts(rows),
                                      self.sampling)
        scored = self.scorer.score(texts, self.eval_rows)
        return {"eval/accuracy": float(np.mean(scored.correct)),
                "eval/reward": nan_mean(torch.tensor(scored.rewards))}

    # --- the run -------------------------------------------------------------------------

    def save(self) -> Path | None:
        """Every rank calls this: rank 0 writes the model and optimizer, each rank its RNG
        states and data position; the folder appears when all are written."""
        run, step = self.run_dir, self.step
        # FSDP: every rank sends its shards to rank 0 (collective), which writes whole tensors
        full = (distributed.full_state(self.model, self.optimizer)
                if distributed.is_sharded(self.model) else (None, None))
        if self.is_main:
            checkpoint.save_shared(run, step, self.policy, self.tokenizer, self.optimizer,
                                   self.scheduler, *full)
        self._barrier()
        # drawing ahead, the stream is past the steps trained: a resume draws those again
        checkpoint.save_rank(run, step, self.rank, {**self.stream.state(),
                                                    "position": self._position},
                             self._rng_at_step_start)
        self._barrier()
        final = checkpoint.finish(run, step) if self.is_main else None
        self._barrier()
        self._saved_step = step
        return final

    def _barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def load_weights(self, path: Path) -> None:
        """The float32 master weights of a checkpoint folder (or its LoRA adapter), into the
        policy, and into the engine that samples for it."""
        from transformers import AutoModelForCausalLM

        if lora.is_lora(self.policy):
            lora.load_adapter(self.policy, path)
        else:
            weights = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                           dtype=MASTER_DTYPE).state_dict()
            if distributed.is_sharded(self.model):
                distributed.load_full_weights(self.model, weights)
            else:
                self.policy.load_state_dict(weights)
        if self.engine is not None:
            self.engine.sync()

    def resume(self, path: Path) -> None:
        """Continue from a checkpoint folder written by ``save``."""
        self.load_weights(path)
        sharded = distributed.is_sharded(self.model)
        state = checkpoint.load_state(path, self.optimizer, self.scheduler, load_optimizer=(
            (lambda osd: distributed.load_full_optimizer(self.model, self.optimizer, osd))
            if sharded else None))
        self.step = int(state["step"])
        self.stream.load_state(checkpoint.load_rank(path, self.rank, state))
        self._position = self.stream.position
        self._saved_step = self.step

    @contextmanager
    def _together(self) -> Iterator[None]:
        """A part of the step that can fail on one rank alone (its engine, its reward
        requests): every rank learns whether any rank failed, and if one did all raise,
        so all stop and save together; a rank that went on would wait in the step's next
        collective for one that is saving, and neither would ever leave."""
        failure: RewardClientError | EngineError | None = None
        try:
            yield
        except (RewardClientError, EngineError) as exc:
            if self.world == 1:
                raise
            failure = exc
        if self.world == 1:
            return
        failed = torch.tensor([float(failure is not None)], device=self.device)
        dist.all_reduce(failed)
        if not failed.item():
            return
        said: list[str | None] = [None] * self.world
        dist.all_gather_object(said, None if failure is None else str(failure))
        if failure is not None:
            raise failure
        rank, reason = next((r, text) for r, text in enumerate(said) if text is not None)
        raise RankFailure(f"rank {rank} failed: {reason}")

    def _sigterm_agreed(self) -> bool:
        """Whether any rank got a SIGTERM during the step: asked by every rank at each
        step's end, so all save that step and stop together (trainer/interrupt.py)."""
        if self.world == 1:
            return False
        held = torch.tensor([float(sigterm_count() > 0)], device=self.device)
        dist.all_reduce(held, op=dist.ReduceOp.MAX)
        return bool(held.item())

    @contextmanager
    def _checkpoint_on_failure(self) -> Iterator[None]:
        """A reward outage or an engine failure, on any rank, stops the run on every rank
        with a checkpoint of the policy as it stands, at the position of the steps it
        trained on: rewards come first, so a failed step's update is undone; an engine
        that failed to take the new weights, or an evaluation that failed, came after it.
        Nothing trains on the engine's stale weights, and --resume goes on."""
        try:
            yield
        except (RewardClientError, EngineError, RankFailure):
            self._stop_drawing()
            self.save()
            raise

    def train(self) -> list[dict[str, Any]]:
        c = self.config
        logger = RunLogger(self.run_dir, c.max_steps, self.step, c.progress_bar and self.is_main,
                           c.report_to, c.model_dump(), self.is_main)
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.json").write_text(c.model_dump_json(indent=2))
        history: list[dict[str, Any]] = []
        hold_sigterm(self.world > 1)
        try:
            if self.step == 0 and self.eval_rows:
                with self._checkpoint_on_failure(), self._together():
                    first = self.evaluate()
                logger.log(0, first)
                logger.write(f"step 0: held-out accuracy {first['eval/accuracy']:.3f}")
            while self.step < c.max_steps:
                with self._checkpoint_on_failure():
                    metrics = self.training_step()
                    last = self.step == c.max_steps
                    if self.eval_rows and (last or (c.eval_every
                                                    and self.step % c.eval_every == 0)):
                        with self._together():
                            metrics.update(self.evaluate())
                        logger.write(f"step {self.step}: held-out accuracy "
                                     f"{metrics['eval/accuracy']:.3f}")
                logger.log(self.step, metrics)
                history.append(metrics)
                if last or (c.save_every and self.step % c.save_every == 0):
                    self.save()
                if not last and self._sigterm_agreed():
                    if self.step > self._saved_step:
                        self.save()
                    raise Terminated
        except KeyboardInterrupt:
            self.interrupted()
            raise
        finally:
            hold_sigterm(False)
            logger.close()
            self.close()
        if self.is_main:
            from trainer.plot import plot_run

            plot_run(self.run_dir)
        return history


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """The trained parameters (LoRA: the adapter's) as AdamW's groups: with weight decay,
    biases and norm weights in a group of their own without it, as transformers' Trainer
    (and so TRL) has them; without, one group (the optimizer state of runs saved so)."""
    from transformers.trainer_pt_utils import get_parameter_names

    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not weight_decay:
        return [{"params": [p for _, p in trained]}]
    # transformers' Trainer.get_decay_parameter_names: by layer type and by name
    decayed = set(get_parameter_names(model, [torch.nn.LayerNorm], [
        r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]))
    return [{"params": [p for n, p in trained if n in decayed]},
            {"params": [p for n, p in trained if n not in decayed], "weight_decay": 0.0}]


class RankFailure(RuntimeError):
    """Another rank's engine or reward requests failed: this rank stops with it (its
    message names the rank and says why)."""


@dataclass
class UpdateBatch:
    """One step's batch of this rank, ready for the update."""

    ids: torch.Tensor  # (N, P + T) prompt then completion
    attn: torch.Tensor  # (N, P + T)
    T: int  # completion width
    loss_mask: torch.Tensor  # (N, T) float: tokens that count
    advantages: torch.Tensor  # (N,)
    old_logps: torch.Tensor | None = None  # (N, T) at sampling time (μ > 1)
    ref_logps: torch.Tensor | None = None  # (N, T) of the reference (β > 0)
    # (N, T), or (N, 1) per sequence: importance weights of engine-drawn samples (w in
    # trainer/loss.py); None: 1
    sampling_weights: torch.Tensor | None = None
    engine_logps: torch.Tensor | None = None  # (N, T) μ of the sampled tokens, engine-drawn
    sampled: torch.Tensor | None = None  # (N, T) 1: a token the policy sampled (not a tool's)
    # (N, T) log S_t, the mass π_θ_old puts on the tokens top-k/p left the engine to draw
    # from (trainer/sampling_correction.py); None: sampling kept the whole vocabulary
    kept_log_mass: torch.Tensor | None = None

    def slices(self, micro_batch_size: int) -> list[slice]:
        N = self.ids.shape[0]
        return [slice(i, i + micro_batch_size) for i in range(0, N, micro_batch_size)]

    def micro(self, rows: slice) -> UpdateBatch:
        """Rows ``rows`` without the columns that are padding in every one of them: left of
        the longest prompt, right of the longest completion (no logit there is needed, and
        once a policy answers in a few tokens most of a fixed-width batch is padding)."""
        P = self.ids.shape[1] - self.T
        attn = self.attn[rows]
        start = int(attn[:, :P].any(0).long().argmax()) if P else 0
        T = max(int(attn[:, P:].sum(1).max()), 1)  # completion masks are 1s, then 0s

        def cut(x: torch.Tensor | None) -> torch.Tensor | None:
            return None if x is None else x[rows, :T]

        return UpdateBatch(self.ids[rows, start : P + T], attn[:, start : P + T], T,
                           self.loss_mask[rows, :T], self.advantages[rows],
                           cut(self.old_logps), cut(self.ref_logps), cut(self.sampling_weights),
                           cut(self.engine_logps), cut(self.sampled), cut(self.kept_log_mass))


def _tool_metrics(rollout: Rollout) -> dict[str, float]:
    """TRL's tools/call_frequency (calls per rollout) and tools/failure_frequency (calls the
    tool could not answer, per call); the programs that failed; the tool's share of tokens."""
    stats, tool_mask = rollout.tool_stats, rollout.tool_mask
    assert stats is not None and tool_mask is not None
    calls, failures, errors, outages = stats.sum(0).tolist()
    tokens = float(rollout.completion_mask.sum())
    tool_tokens = float(((1 - tool_mask) * rollout.completion_mask).sum())
    return {"tools/call_frequency": calls / len(rollout.texts),
            "tools/failure_frequency": failures / calls if calls else 0.0,
            "tools/program_error_frequency": errors / calls if calls else 0.0,
            "tools/outage_frequency": outages / calls if calls else 0.0,
            "tools/rollouts_with_calls": float((stats[:, 0] > 0).float().mean()),
            "tools/output_token_fraction": tool_tokens / max(tokens, 1.0),
            "time/tools": rollout.tool_seconds}


def _average_over_ranks(metrics: dict[str, Any], device: torch.device) -> dict[str, Any]:
    keys = [k for k, v in metrics.items() if isinstance(v, float)]
    values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    values /= dist.get_world_size()
    return {**metrics, **dict(zip(keys, values.tolist(), strict=True))}
