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

import copy
import math
import random
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from transformers import PreTrainedModel, PreTrainedTokenizerBase, get_scheduler

from reward_server.client import RewardClient, RewardClientError
from trainer import checkpoint
from trainer.advantages import group_advantages
from trainer.config import GRPOConfig
from trainer.data import PromptStream, Row
from trainer.logprobs import completion_logps
from trainer.loss import policy_loss
from trainer.metrics import RunLogger
from trainer.models import prepare_tokenizer
from trainer.rewards import RewardScorer, ScoredBatch, Scorer
from trainer.rollout import Rollout, format_prompt, generate, pad_and_stack


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(config: GRPOConfig) -> tuple[torch.device, torch.dtype]:
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
    ) -> None:
        """``reward_client`` scores through the server; a ``scorer`` (e.g. FunctionScorer)
        replaces it."""
        self.config = config
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.is_main = self.rank == 0
        self.device, self.dtype = resolve_device(config)
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.policy = model.to(self.device, self.dtype)
        if config.gradient_checkpointing:
            kwargs = {"use_reentrant": False}
            if hasattr(self.policy, "activation_checkpointing_enable"):  # transformers >= 5.2x
                self.policy.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                self.policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        # β = 0: no reference model in memory at all (TRL does the same)
        self.ref_model = None
        if config.beta > 0:
            self.ref_model = (ref_model or copy.deepcopy(model)).to(self.device, self.dtype)
            self.ref_model.eval().requires_grad_(False)
        self.model: torch.nn.Module = self.policy
        if self.world > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = torch.nn.parallel.DistributedDataParallel(self.policy, device_ids=ids)
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay,
            betas=(config.adam_beta1, config.adam_beta2),
            fused=True)  # one kernel over all parameters: faster, no per-step temporaries
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

    # --- 1-3: sampling and rewards -----------------------------------------------------------

    def _prompts(self, rows: list[Row]) -> list[str]:
        c = self.config
        return [format_prompt(r, self.tokenizer, c.prompt_column, c.system_prompt,
                              c.use_chat_template) for r in rows]

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
            rollout = generate(self.policy, self.tokenizer, chunk, self._prompts(chunk),
                               c.num_generations, c.max_prompt_length,
                               c.max_completion_length, c.temperature, c.top_p)
            t_generate += time.perf_counter() - t0
            rollouts.append(rollout)
            futures.append(self.scorer.submit(rollout.texts, rollout.rows))
        t0 = time.perf_counter()
        scored = [f.result() for f in futures]  # a failed reward call raises here, loudly
        t_wait = time.perf_counter() - t0
        return (pad_and_stack(rollouts, self.tokenizer.pad_token_id), ScoredBatch.concat(scored),
                t_generate, t_wait)

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
    def _logps_no_grad(self, model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor,
                       T: int) -> torch.Tensor:
        mb = self.config.micro_batch_size
        return torch.cat([completion_logps(model, ids[i : i + mb], attn[i : i + mb], T,
                                           self.config.temperature)
                          for i in range(0, ids.shape[0], mb)])

    # --- 5: the update ---------------------------------------------------------------------

    def training_step(self) -> dict[str, Any]:
        c = self.config
        t_step = time.perf_counter()
        rollout, scored, timing = self._sample_batch()

        rewards = torch.tensor(scored.rewards, dtype=torch.float32)
        advantages, stats = group_advantages(rewards, c.num_generations, c.scale_rewards)

        ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], 1).to(self.device)
        attn = torch.cat([rollout.prompt_mask, rollout.completion_mask], 1).to(self.device)
        T = rollout.completion_ids.shape[1]
        loss_mask = rollout.completion_mask.clone().float()
        if c.mask_truncated_completions:
            loss_mask[rollout.truncated] = 0.0  # DAPO overlong filtering
        loss_mask = loss_mask.to(self.device)
        advantages = advantages.to(self.device)

        t_train = time.perf_counter()
        self.policy.train()
        old_logps = (self._logps_no_grad(self.policy, ids, attn, T)
                     if c.num_iterations > 1 else None)
        ref_logps = (self._logps_no_grad(self.ref_model, ids, attn, T)
                     if self.ref_model is not None else None)
        tokens = loss_mask.sum()
        if self.world > 1 and c.loss_type == "dapo":
            dist.all_reduce(tokens)  # DAPO normalises by the tokens of the global batch
        N = ids.shape[0]
        mb = c.micro_batch_size
        starts = list(range(0, N, mb))
        sums: dict[str, float] = {}
        losses, grad_norms = [], []
        for _ in range(c.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            total_loss = 0.0
            for k, i in enumerate(starts):
                sl = slice(i, i + mb)
                sync = self.world > 1 and k < len(starts) - 1
                with self.model.no_sync() if sync else nullcontext():
                    logps = completion_logps(self.model, ids[sl], attn[sl], T, c.temperature)
                    loss, m = policy_loss(
                        logps, None if old_logps is None else old_logps[sl],
                        None if ref_logps is None else ref_logps[sl], advantages[sl],
                        loss_mask[sl], loss_type=c.loss_type, epsilon_low=c.epsilon_low,
                        epsilon_high=c.epsilon_high_value, beta=c.beta,
                        importance_sampling_level=c.importance_sampling_level,
                        max_completion_length=c.max_completion_length,
                        num_items_in_batch=float(tokens),
                    )
                    if c.loss_type == "dapo":
                        scaled = loss * self.world  # DDP averages gradients over ranks
                    elif c.loss_type == "bnpo":
                        scaled = loss * (loss_mask[sl].sum() / loss_mask.sum().clamp(min=1))
                    else:
                        scaled = loss * (ids[sl].shape[0] / N)
                    scaled.backward()
                total_loss += float(scaled.detach())
                weight = ids[sl].shape[0] / N
                for key, value in m.items():
                    sums[key] = sums.get(key, 0.0) + value * weight / c.num_iterations
            grad_norms.append(float(torch.nn.utils.clip_grad_norm_(self.policy.parameters(),
                                                                   c.max_grad_norm)))
            self.optimizer.step()
            self.scheduler.step()
            losses.append(total_loss)
        t_end = time.perf_counter()
        self.step += 1
        return self._metrics(rollout, scored, rewards, advantages, stats, timing, sums, losses,
                             grad_norms, t_step, t_train, t_end)

    def _metrics(self, rollout: Rollout, scored: ScoredBatch, rewards: torch.Tensor,
                 advantages: torch.Tensor, stats: Any, timing: dict[str, float],
                 sums: dict[str, float], losses: list[float], grad_norms: list[float],
                 t_step: float, t_train: float, t_end: float) -> dict[str, Any]:
        lengths = rollout.completion_mask.sum(1).float()
        step_time = t_end - t_step
        out: dict[str, Any] = {
            "reward": _nanmean(rewards), "reward_std": _nanstd(rewards),
            "accuracy": float(np.mean(scored.correct)),
            "advantages/mean": float(advantages.mean()), "advantages/std": float(advantages.std()),
            "advantages/min": float(advantages.min()), "advantages/max": float(advantages.max()),
            "frac_reward_zero_std": float(stats.zero_std.float().mean()),
            "completion_length": float(lengths.mean()),
            "completion_length_max": float(lengths.max()),
            "truncated_fraction": float(rollout.truncated.float().mean()),
            "tokens_per_s": float(lengths.sum()) / step_time,
            "loss": float(np.mean(losses)), "grad_norm": float(np.mean(grad_norms)),
            "learning_rate": self.scheduler.get_last_lr()[0],
            "time/train": t_end - t_train, "time/step": step_time,
            "reward_wait_share": timing["time/reward_wait"] / step_time,
            **timing, **sums,
        }
        for name, values in scored.per_verifier.items():
            scores = torch.tensor([math.nan if v is None else v for v in values])
            out[f"rewards/{name}/mean"] = _nanmean(scores)
            out[f"rewards/{name}/std"] = _nanstd(scores)
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
        c = self.config
        self.policy.eval()
        texts: list[str] = []
        for start in range(0, len(self.eval_rows), 16):
            rows = self.eval_rows[start : start + 16]
            enc = self.tokenizer(self._prompts(rows), return_tensors="pt", padding=True,
                                 truncation=True, max_length=c.max_prompt_length,
                                 add_special_tokens=False).to(self.device)
            out = self.policy.generate(**enc, do_sample=False,
                                       max_new_tokens=c.max_completion_length,
                                       pad_token_id=self.tokenizer.pad_token_id,
                                       eos_token_id=self.tokenizer.eos_token_id)
            texts += self.tokenizer.batch_decode(out[:, enc.input_ids.shape[1]:],
                                                 skip_special_tokens=True)
        scored = self.scorer.score(texts, self.eval_rows)
        return {"eval/accuracy": float(np.mean(scored.correct)),
                "eval/reward": _nanmean(torch.tensor(scored.rewards))}

    # --- the run -------------------------------------------------------------------------

    def save(self) -> Path | None:
        if not self.is_main:
            return None
        return checkpoint.save(self.run_dir, self.step, self.policy, self.tokenizer,
                               self.optimizer, self.scheduler, self.stream.state())

    def resume(self, path: Path) -> None:
        """Continue from a checkpoint folder written by ``save``."""
        from transformers import AutoModelForCausalLM

        weights = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                       dtype=self.dtype).state_dict()
        self.policy.load_state_dict(weights)
        state = checkpoint.load_state(path, self.optimizer, self.scheduler)
        self.step = int(state["step"])
        self.stream.load_state(state["data"])

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
        if self.is_main:
            from trainer.plot import plot_run

            plot_run(self.run_dir)
        return history


def _select(r: Rollout, index: list[int]) -> Rollout:
    idx = torch.tensor(index, dtype=torch.long)
    return Rollout(r.prompt_ids[idx], r.prompt_mask[idx], r.completion_ids[idx],
                   r.completion_mask[idx], r.truncated[idx], [r.texts[i] for i in index],
                   [r.rows[i] for i in index])


def _select_scored(s: ScoredBatch, index: list[int]) -> ScoredBatch:
    return ScoredBatch([s.rewards[i] for i in index],
                       {k: [v[i] for i in index] for k, v in s.per_verifier.items()},
                       [s.correct[i] for i in index])


def _nanmean(x: torch.Tensor) -> float:
    return float(torch.nanmean(x.float())) if (~torch.isnan(x)).any() else math.nan


def _nanstd(x: torch.Tensor) -> float:
    valid = x[~torch.isnan(x)].float()
    return float(valid.std()) if valid.numel() > 1 else 0.0


def _average_over_ranks(metrics: dict[str, Any], device: torch.device) -> dict[str, Any]:
    keys = [k for k, v in metrics.items() if isinstance(v, float)]
    values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    values /= dist.get_world_size()
    return {**metrics, **dict(zip(keys, values.tolist(), strict=True))}
