"""The trainer's engine in colocate mode (TRL's ``vllm_mode="colocate"``): one engine per
training process, started with the policy's weights and given them again after every
optimizer step, so each step samples from the policy it updates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer.config import GRPOConfig
from trainer.engine.client import (
    DEFAULT_PYTHON,
    EngineError,
    EngineSettings,
    StagedWeights,
    VLLMEngine,
)
from trainer.engine.multiturn import generate_with_tools_on_engine
from trainer.engine.sampling import generate_on_engine
from trainer.engine.weights import policy_weights
from trainer.multiturn import ToolUse, closer_ids
from trainer.rollout import Prompt, Rollout, Sampling
from trainer.seeds import DrawSeeds


def engine_settings(config: GRPOConfig, seed: int, dtype: torch.dtype, rank: int = 0
                    ) -> EngineSettings:
    """The engine's settings from the run's: the trainer's compute dtype, a context that
    holds a prompt and a completion, and its log in the run's folder (one per rank)."""
    log = "vllm_engine.log" if rank == 0 else f"vllm_engine-rank{rank}.log"
    return EngineSettings(log_path=Path(config.output_dir) / log,
        python=Path(config.vllm_python) if config.vllm_python else DEFAULT_PYTHON,
        dtype=(str(dtype).removeprefix("torch.") if config.vllm_dtype == "auto"
               else config.vllm_dtype), seed=seed,
        max_model_len=config.max_prompt_length + config.max_completion_length,
        max_num_seqs=max(config.prompts_per_step * config.num_generations, 16),
        kv_cache_gb=config.vllm_kv_cache_gb,
        gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        block_size=config.vllm_block_size, start_timeout_s=config.vllm_start_timeout_s,
        request_timeout_s=config.vllm_request_timeout_s)


class ColocatedEngine:
    """Rollouts from a vLLM engine that follows ``policy``'s weights."""

    def __init__(self, engine: VLLMEngine, policy: torch.nn.Module,
                 tokenizer: PreTrainedTokenizerBase, eos_ids: list[int],
                 synced: bool = False) -> None:
        """``engine`` holds ``policy``'s weights if ``synced``; else (an engine shared by
        several runs, as the tests do) they are loaded now."""
        self.engine, self.policy, self.tokenizer, self.eos_ids = engine, policy, tokenizer, eos_ids
        self._closers: list[int] | None = None  # found once: a pass over the vocabulary
        if not synced:
            self.sync()

    @classmethod
    def start(cls, config: GRPOConfig, seed: int, dtype: torch.dtype, policy: torch.nn.Module,
              tokenizer: PreTrainedTokenizerBase, eos_ids: list[int], rank: int = 0
              ) -> ColocatedEngine:
        """A new engine, loaded with ``policy``'s config and weights."""
        context = config.max_prompt_length + config.max_completion_length
        limit = getattr(_base(policy).config, "max_position_embeddings", None)
        if limit is not None and context > limit:  # vLLM refuses it, in three lines
            raise EngineError(f"max_prompt_length + max_completion_length = {context} is more "
                              f"than the model's context ({limit} positions): lower them")
        with policy_weights(policy) as weights:
            engine = VLLMEngine(_base(policy), engine_settings(config, seed, dtype, rank),
                                weights)
        return cls(engine, policy, tokenizer, eos_ids, synced=True)

    def generate(self, rows: list[dict[str, Any]], prompts: list[Prompt],
                 sampling: Sampling, greedy: bool = False, tools: ToolUse | None = None,
                 seeds: DrawSeeds | None = None) -> Rollout:
        """Single-turn completions, or with ``tools`` rollouts that call the code tool;
        ``seeds``: the step's (trainer/seeds.py), none when ``greedy``."""
        if tools is None:
            return generate_on_engine(self.engine, self.tokenizer, rows, prompts, sampling,
                                      self.eos_ids, greedy, seeds)
        if self._closers is None:
            self._closers = closer_ids(self.tokenizer, tools.format)
        return generate_with_tools_on_engine(self.engine, self.tokenizer, rows, prompts,
                                             sampling, tools, self.eos_ids, greedy,
                                             self._closers, seeds)

    def sync(self) -> float:
        """The policy's weights into the engine; the seconds it took."""
        with policy_weights(self.policy) as weights:
            self.engine.load_weights(weights)
        return self.engine.weight_sync_s

    def stage(self) -> StagedWeights:
        """A copy of the policy's weights as they are now, for ``load`` later: drawing ahead,
        the engine takes them when it is between two batches, while the policy moves on."""
        with policy_weights(self.policy) as weights:
            return StagedWeights(weights)

    def load(self, staged: StagedWeights) -> None:
        self.engine.load_staged(staged)

    def close(self, wait: bool = True) -> None:
        """``wait`` False: ended at once, a request in flight or not (``VLLMEngine.close``)."""
        self.engine.close(wait)


def _base(policy: torch.nn.Module) -> torch.nn.Module:
    """The model whose config the engine loads: under a LoRA adapter, its base."""
    return policy.get_base_model() if hasattr(policy, "get_base_model") else policy
