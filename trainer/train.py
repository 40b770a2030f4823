"""The GRPO loop, in algorithm order (DeepSeekMath 2024, Algorithm 1, outcome supervision):

    for each step:
        1. take a batch of prompts (this rank's shard)
        2. sample G completions per prompt; each chunk of prompts is sent to the reward server
           while the next chunk is generated
        3. wait for the rewards; group-relative advantages
        4. log-probs at sampling time (μ > 1) and of the reference model (β > 0)
        5. μ optimisation passes of the clipped objective over micro-batches, one optimizer
           step per pass (gradient accumulation, clipping, LR schedule with warm-up)
        6. metrics, checkpoint, evaluation
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from transformers import PreTrainedModel, PreTrainedTokenizerBase, get_scheduler

from reward_server.client import RewardClient, RewardClientError
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
from trainer.config import OVERLONG, GRPOConfig
from trainer.data import PromptStream, Row
from trainer.engine.client import VLLMEngine
from trainer.engine.colocated import ColocatedEngine
from trainer.logprobs import completion_logps
from trainer.loss import loss_normalizer, policy_loss
from trainer.metrics import RunLogger
from trainer.models import (
    MASTER_DTYPE,
    disable_dropout,
    prepare_policy,
    prepare_tokenizer,
    reference_model,
)
from trainer.multiturn import ToolUse, generate_with_tools, without_outages
from trainer.rewards import RewardScorer, ScoredBatch, Scorer
from trainer.rollout import (
    Prompt,
    Rollout,
    Sampling,
    eos_token_ids,
    format_prompt,
    generate,
    greedy_texts,
    pad_and_stack,
)
from trainer.shaping import overlong_penalties
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
            [p for p in self.policy.parameters() if p.requires_grad],  # LoRA: the adapter
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
            scorer = RewardScorer(config.rewards, reward_client)
        self.scorer = scorer
        self.run_dir = Path(config.output_dir)
        self.step = 0
        self.sampling = Sampling(config.num_generations, config.max_prompt_length,
                                 config.max_completion_length, config.temperature,
                                 config.top_p, config.top_k, self.share_prompts)
        self._warned_cut = False
        self.tool_use = self._tool_use() if config.code_tool else None
        self._owns_engine = engine is None
        self.engine = self._engine(engine) if config.rollout_engine == "vllm" else None

    def _tool_use(self) -> ToolUse:
        c = self.config
        tool = CodeTool(c.tool_url or c.reward_url[0], state=c.tool_state, token=c.reward_token,
                        run_timeout_s=c.tool_run_timeout_s,
                        request_timeout_s=c.tool_request_timeout_s,
                        max_output_chars=c.max_tool_output_chars, concurrency=c.tool_concurrency)
        return ToolUse(tool, call_format(c.tool_format, self.tokenizer), c.max_tool_turns)

    def _engine(self, engine: VLLMEngine | None) -> ColocatedEngine:
        eos_ids = eos_token_ids(self.policy, self.tokenizer)
        if engine is not None:
            return ColocatedEngine(engine, self.policy, self.tokenizer, eos_ids)
        return ColocatedEngine.start(self.config, self.config.seed + self.rank, self.dtype,
                                     self.policy, self.tokenizer, eos_ids)

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

    # --- 1-3: sampling and rewards -----------------------------------------------------------

    def _prompts(self, rows: list[Row]) -> list[Prompt]:
        c = self.config
        tools = self.tool_use.format.tools() if self.tool_use else None
        return [format_prompt(r, self.tokenizer, c.prompt_column, c.system_prompt,
                              c.use_chat_template, c.prompt_suffix, tools) for r in rows]

    def _generate(self, rows: list[Row], greedy: bool = False) -> Rollout:
        """One chunk's completions: single-turn, or with the code tool (trainer/multiturn.py)."""
        if self.engine is not None:
            return self.engine.generate(rows, self._prompts(rows), self.sampling, greedy,
                                        self.tool_use)
        with self.autocast():
            if self.tool_use is not None:
                return generate_with_tools(self.policy, self.tokenizer, rows, self._prompts(rows),
                                           self.sampling, self.tool_use, greedy)
            return generate(self.policy, self.tokenizer, rows, self._prompts(rows),
                            self.sampling)

    def _sample(self, rows: list[Row]) -> tuple[Rollout, ScoredBatch, float, float]:
        """Generate chunk by chunk, each chunk scored in the background while the next is
        generated. Returns the rollout, its rewards, and seconds generating / waiting."""
        c = self.config
        rollouts, futures = [], []
        t_generate = 0.0
        self.policy.eval()
        for start in range(0, len(rows), c.generation_chunk):
            chunk = rows[start : start + c.generation_chunk]
            t0 = time.perf_counter()
            rollout = self._generate(chunk)
            t_generate += time.perf_counter() - t0 - rollout.tool_seconds
            self._warn_cut(rollout)
            rollouts.append(rollout)
            futures.append(self.scorer.submit(rollout.texts, rollout.rows, c.num_generations,
                                              rollout.truncated.tolist()))
        t0 = time.perf_counter()
        # a failed reward call raises here, loudly
        scored = [self._shape(without_outages(f.result(), r), r)
                  for f, r in zip(futures, rollouts, strict=True)]
        t_wait = time.perf_counter() - t0
        return (pad_and_stack(rollouts, self.tokenizer.pad_token_id), ScoredBatch.concat(scored),
                t_generate, t_wait)

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
                          "them); raise max_prompt_length to keep them whole", stacklevel=3)
            self._warned_cut = True

    def _sample_batch(self) -> tuple[Rollout, ScoredBatch, dict[str, float]]:
        """Steps 1-2, with DAPO dynamic sampling: zero-std groups are dropped and replaced by
        fresh prompts, up to ``max_resample_rounds`` rounds."""
        c = self.config
        G = c.num_generations
        rows = self.stream.take(c.prompts_per_step)
        rollout, scored, t_gen, t_wait = self._sample(rows)
        info = {"resample_rounds": 0.0, "dropped_groups": 0.0}
        if not c.dynamic_sampling:
            return rollout, scored, {"time/generate": t_gen, "time/reward_wait": t_wait, **info}
        kept_r, kept_s = [], []
        for round_ in range(c.max_resample_rounds + 1):
            rewards = torch.tensor(scored.rewards)
            _, stats = group_advantages(rewards, G, c.scale_rewards)
            keep = (~stats.zero_std).nonzero().flatten().tolist()
            info["dropped_groups"] += float(stats.zero_std.sum())
            if keep:
                index = [g * G + i for g in keep for i in range(G)]
                kept_r.append(_select(rollout, index))
                kept_s.append(_select_scored(scored, index))
            have = sum(len(r.texts) for r in kept_r) // G
            if have >= c.prompts_per_step or round_ == c.max_resample_rounds:
                break
            info["resample_rounds"] += 1
            rollout, scored, g2, w2 = self._sample(self.stream.take(c.prompts_per_step - have))
            t_gen, t_wait = t_gen + g2, t_wait + w2
        if not kept_r:  # every group was zero-std: train on the last one (advantages are 0)
            kept_r, kept_s = [rollout], [scored]
        rollout = pad_and_stack(kept_r, self.tokenizer.pad_token_id)
        scored = ScoredBatch.concat(kept_s)
        limit = c.prompts_per_step * G
        if len(rollout.texts) > limit:
            rollout = _select(rollout, list(range(limit)))
            scored = _select_scored(scored, list(range(limit)))
        return rollout, scored, {"time/generate": t_gen, "time/reward_wait": t_wait, **info}

    # --- 4: log-probs ----------------------------------------------------------------------

    @torch.no_grad()
    def _logps_no_grad(self, model: torch.nn.Module, batch: UpdateBatch) -> torch.Tensor:
        """(N, T) log-probs without a graph, over the same micro-batches as the update (the
        same numerics: ratios are exactly 1 before the first update); 0 past a row's end."""
        out = torch.zeros(batch.loss_mask.shape, dtype=torch.float32, device=self.device)
        for sl in batch.slices(self.config.micro_batch_size):
            part = batch.micro(sl)
            with self.autocast():
                out[sl, : part.T] = completion_logps(model, part.ids, part.attn, part.T,
                                                     self.config.temperature,
                                                     self._prompt_model(model))
        return out

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

    def _engine_gap(self, rollout: Rollout, batch: UpdateBatch) -> dict[str, float]:
        """How far the engine's log-probs of the sampled tokens are from the trainer's, over
        every sampled token (kernels and precision differ; a stale weight shows here)."""
        assert rollout.engine_logps is not None
        ours = (batch.old_logps if batch.old_logps is not None
                else self._logps_no_grad(self.policy, batch))
        sampled = rollout.completion_mask.to(self.device)
        gap = (ours - rollout.engine_logps.to(self.device)).abs() * sampled
        return {"engine/logprob_gap": float(gap.sum() / sampled.sum().clamp(min=1)),
                "engine/logprob_gap_max": float(gap.max())}

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
        for k, sl in enumerate(slices):
            part = batch.micro(sl)
            skip_sync = self.world > 1 and k < len(slices) - 1  # DDP all-reduces the last
            with distributed.accumulating(self.model, skip_sync):
                with self.autocast():
                    logps = completion_logps(self.model, part.ids, part.attn, part.T,
                                             c.temperature, self._prompt_model(self.model))
                loss, m = policy_loss(
                    logps, part.old_logps, part.ref_logps, part.advantages, part.loss_mask,
                    loss_type=c.loss_type, epsilon_low=c.epsilon_low,
                    epsilon_high=c.epsilon_high_value, beta=c.beta,
                    importance_sampling_level=c.importance_sampling_level,
                    max_completion_length=c.max_completion_length, normalizer=normalizer)
                loss.backward()
            total += float(loss.detach())
            weight = part.ids.shape[0] / N
            for key, value in m.items():
                sums[key] = sums.get(key, 0.0) + value * weight
        return total, sums

    def training_step(self) -> dict[str, Any]:
        c = self.config
        t_step = time.perf_counter()
        rollout, scored, timing = self._sample_batch()

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
        if c.num_iterations > 1:
            batch.old_logps = self._logps_no_grad(self.policy, batch)
        if c.beta > 0:
            batch.ref_logps = self.reference_logps(batch)
        if rollout.engine_logps is not None:
            timing.update(self._engine_gap(rollout, batch))
        normalizer = self.normalizer(loss_mask)
        sums: dict[str, float] = {}
        losses, grad_norms = [], []
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
        if self.engine is not None:  # the next step samples the new policy (once: the μ
            timing["time/weight_sync"] = self.engine.sync()  # passes sample nothing)
        t_end = time.perf_counter()
        self.step += 1
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
                texts += self._generate(rows, greedy=True).texts
                continue
            with self.autocast():
                texts += greedy_texts(self.policy, self.tokenizer, self._prompts(rows),
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
        checkpoint.save_rank(run, step, self.rank, self.stream.state())
        self._barrier()
        final = checkpoint.finish(run, step) if self.is_main else None
        self._barrier()
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

    def train(self) -> list[dict[str, Any]]:
        c = self.config
        logger = RunLogger(self.run_dir, c.max_steps, self.step, c.progress_bar and self.is_main,
                           c.report_to, c.model_dump(), self.is_main)
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.json").write_text(c.model_dump_json(indent=2))
        history: list[dict[str, Any]] = []
        try:
            if self.step == 0 and self.eval_rows:
                first = self.evaluate()
                logger.log(0, first)
                logger.write(f"step 0: held-out accuracy {first['eval/accuracy']:.3f}")
            while self.step < c.max_steps:
                position = self.stream.position
                try:
                    metrics = self.training_step()
                except RewardClientError:
                    # No update was made (rewards come first): keep the work so far, and let
                    # --resume draw this step's prompts again.
                    self.stream.position = position
                    self.save()
                    raise
                last = self.step == c.max_steps
                if self.eval_rows and (last or (c.eval_every and self.step % c.eval_every == 0)):
                    metrics.update(self.evaluate())
                    logger.write(f"step {self.step}: held-out accuracy "
                                 f"{metrics['eval/accuracy']:.3f}")
                logger.log(self.step, metrics)
                history.append(metrics)
                if last or (c.save_every and self.step % c.save_every == 0):
                    self.save()
        finally:
            logger.close()
            self.scorer.close()
            if self.tool_use is not None:
                self.tool_use.tool.close()
            if self.engine is not None and self._owns_engine:
                self.engine.close()
        if self.is_main:
            from trainer.plot import plot_run

            plot_run(self.run_dir)
        return history


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
                           cut(self.old_logps), cut(self.ref_logps))


def _select(r: Rollout, index: list[int]) -> Rollout:
    idx = torch.tensor(index, dtype=torch.long)
    return Rollout(r.prompt_ids[idx], r.prompt_mask[idx], r.completion_ids[idx],
                   r.completion_mask[idx], r.truncated[idx], [r.texts[i] for i in index],
                   [r.rows[i] for i in index], r.prompt_cut[idx],
                   None if r.tool_mask is None else r.tool_mask[idx],
                   None if r.tool_stats is None else r.tool_stats[idx], r.tool_seconds,
                   None if r.engine_logps is None else r.engine_logps[idx])


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


def _select_scored(s: ScoredBatch, index: list[int]) -> ScoredBatch:
    return ScoredBatch([s.rewards[i] for i in index],
                       {k: [v[i] for i in index] for k, v in s.per_verifier.items()},
                       [s.correct[i] for i in index])


def _average_over_ranks(metrics: dict[str, Any], device: torch.device) -> dict[str, Any]:
    keys = [k for k, v in metrics.items() if isinstance(v, float)]
    values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    values /= dist.get_world_size()
    return {**metrics, **dict(zip(keys, values.tolist(), strict=True))}
