"""GRPOConfig: every option of a run, with its default and why, validated in one place.

Loaded from YAML with ``--set key=value`` overrides (``trainer.cli``). Names follow TRL's
GRPOConfig where the option exists there."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from reward_server.client import split_urls
from reward_server.tool_client import ToolState
from trainer import gym_tasks
from trainer.advantages import ScaleRewards
from trainer.loss import ImportanceSamplingLevel, LossType
from trainer.sampling_correction import ImportanceSamplingMode


class RewardSpec(BaseModel):
    """One verifier of the reward server and its weight in the total reward."""

    model_config = ConfigDict(extra="forbid")
    verifier: str = Field(description="Verifier name on the server, e.g. 'math' or 'code'.")
    name: str | None = Field(None, min_length=1, description="Its column in the metrics "
                             "(rewards/<name>/mean); default: the verifier. Two specs of one "
                             "verifier (two format rules) need distinct names.")
    weight: float = Field(1.0, description="Weight in the summed reward.")
    columns: dict[str, str] = Field(
        default_factory=lambda: {"answer": "answer"},
        description="Dataset column -> verifier field, sent with each completion.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Fixed verifier fields, e.g. {extract: last_number}.")

    @property
    def label(self) -> str:
        """The name its scores go by in ScoredBatch.per_verifier and the metrics."""
        return self.name or self.verifier


OVERLONG = "overlong"  # the metric column of the overlong penalty (rewards/overlong/mean)


class OverlongBuffer(BaseModel):
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, eq. 13), a reward
    term the trainer adds itself (only it knows a completion's token count |y|)::

        R_length(y) = 0                               if |y| <= L_max - L_cache
                      ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
                      -1                              if |y| > L_max

    added to the total as ``penalty_factor * R_length``. Names follow veRL's
    ``overlong_buffer`` (``len``, ``penalty_factor``; its DAPO recipe: 4096 and 1.0 under a
    20480-token limit); |y| counts the completion's tokens through its EOS, as veRL's
    ``valid_response_length`` does."""

    model_config = ConfigDict(extra="forbid")
    len: int = Field(gt=0, description="L_cache: the last tokens before L_max over which the "
                     "penalty grows linearly from 0 to -1.")
    penalty_factor: float = Field(1.0, ge=0, description="Its weight in the total reward.")
    max_length: int | None = Field(None, gt=0, description="L_max; default "
                                   "max_completion_length (DAPO's and veRL's choice: a cut "
                                   "completion gets the whole penalty).")


def _is_http_url(url: str) -> bool:
    """A typo (``htp://``, ``host:8000`` without a scheme, a bad port) fails at load time
    with the URL named, not as a connection error after the model has loaded."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (raises on a port that is not a number)
    except ValueError:
        return False
    return (parts.scheme in ("http", "https") and bool(parts.hostname)
            and not any(c.isspace() for c in url))


class GRPOConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # --- model and data -------------------------------------------------------------------
    model: str = Field("smollm2", description="'smollm2' (embedded SmolLM2-135M-Instruct, no "
                       "download), 'tiny' (a small model built in code), or a local HF path.")
    dataset: str = Field("arithmetic", description="A JSONL file, 'arithmetic' for the "
                         "generated addition set, or 'reasoning_gym:<task>[,<task>...]' "
                         "(reasoning-gym's generators: rows carry entry, task and config for "
                         "the reasoning_gym verifier).")
    eval_dataset: str | None = Field(None, description="Held-out JSONL (or 'arithmetic-eval', "
                                     "or 'reasoning_gym:<task>...': eval_samples entries from "
                                     "other seeds, none a training question).")
    dataset_size: int = Field(gym_tasks.DEFAULT_SIZE, ge=1, description="reasoning_gym: "
                              "entries per task (reasoning-gym's own default is 500).")
    dataset_seed: int = Field(gym_tasks.DEFAULT_SEED, description="reasoning_gym: the "
                              "training entries' seed (the library's default, None, would draw "
                              "another set each run).")
    dataset_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="reasoning_gym: per task, fields of its config, "
        "e.g. {basic_arithmetic: {max_terms: 2, max_digits: 1}}.")
    prompt_column: str = "prompt"
    system_prompt: str | None = Field(None, description="Prepended as a system message.")
    prompt_suffix: str = Field("", description="Appended to each text prompt, as veRL's data "
                               "recipes append their instruction to the question (' Reply with "
                               "only the number.'): a small model such as SmolLM2-135M follows "
                               "it there, and mostly ignores a system prompt.")
    use_chat_template: bool = Field(True, description="Wrap prompts in the tokenizer's chat "
                                    "template (instruct models expect it).")
    output_dir: str = "runs/grpo"

    # --- rewards ----------------------------------------------------------------------------
    reward_url: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8000"], description="One reward server "
        "URL, several separated by commas, or a list: each batch is spread over them, and a "
        "dead one's share fails over to the others. Held as a list of http(s) URLs.")
    reward_token: str | None = None
    rewards: list[RewardSpec] = Field(
        default_factory=lambda: [RewardSpec(verifier="math", params={"extract": "last_number"})])
    overlong_buffer: OverlongBuffer | None = Field(
        None, description="DAPO's soft overlong punishment, e.g. {len: 16, penalty_factor: "
        "1.0} (null: off); logged as rewards/overlong/*.")
    reward_batch_size: int = Field(256, ge=1, description="Items per reward request.")
    reward_timeout_s: float = Field(120.0, gt=0)
    reward_max_attempts: int | None = Field(
        None, ge=1, description="Tries per reward request (null: limited by reward_retry_for_s "
        "only).")
    reward_retry_for_s: float = Field(
        600.0, gt=0, description="How long a step waits for a reward server to come back "
        "(restarts, rolling deploys); then training stops with a checkpoint, loudly.")

    # --- sampling ---------------------------------------------------------------------------
    max_steps: int = Field(20, ge=1)
    prompts_per_step: int = Field(4, ge=1, description="Prompts per step per process.")
    num_generations: int = Field(8, ge=2, description="G: completions per prompt (DeepSeekMath "
                                 "uses 64; 8 is TRL's default).")
    generation_chunk: int = Field(
        2, ge=1, description="Prompts per generate() call; each chunk is scored while the next "
        "one is generated.")
    max_prompt_length: int = Field(256, ge=1)
    max_completion_length: int = Field(64, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, description="Sample from the k most likely tokens (0: off). "
                       "Nothing else shapes sampling: the model's generation_config "
                       "(repetition_penalty, min_p, ...) is not used.")

    # --- the rollout engine (trainer/engine/) ------------------------------------------------
    rollout_engine: Literal["hf", "vllm"] = Field(
        "hf", description="What draws the completions: 'hf', the policy's own generate(); "
        "'vllm', a vLLM engine in a process of its own (its environment: bash "
        "scripts/setup_vllm.sh), given the policy's weights after every optimizer step, as "
        "TRL's vllm_mode='colocate' does. Each sampled token's log-prob under the engine "
        "comes back with the completions (metrics sampling/sampling_logp_difference/*).")
    vllm_python: Path | None = Field(
        None, description="The Python of vLLM's environment; default .venv-vllm/bin/python "
        "beside the trainer's code.")
    vllm_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="The engine's weights and compute; 'auto': the trainer's compute "
        "dtype. A lower precision than the trainer's draws faster and the importance weights "
        "correct the mismatch (sampling/sampling_logp_difference measures it).")
    vllm_kv_cache_gb: int = Field(2, ge=1, description="The engine's KV cache on a CPU, in "
                                  "GiB (vLLM's VLLM_CPU_KVCACHE_SPACE).")
    vllm_block_size: int | None = Field(
        None, ge=16, description="The engine's KV-cache block, in tokens: only whole blocks "
        "of a prompt are shared between its G samples and across steps. Default: 32 on a CPU "
        "(vLLM's 128 there would cache no prompt shorter than that), vLLM's own on a GPU.")
    vllm_start_timeout_s: float = Field(
        900.0, gt=0, description="How long the engine may take to start (load the model, "
        "allocate its KV cache, draw one token) before the run stops, naming this setting: "
        "an engine that hangs at its start would otherwise hang the run.")
    vllm_request_timeout_s: float = Field(
        1800.0, gt=0, description="How long one engine request (a step's draw, a weight "
        "load) may take before the run stops with a checkpoint: an engine that is alive "
        "but stuck would otherwise hang the run.")
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, le=1, description="The share of the GPU's memory the engine takes (its "
        "weights and KV cache), on a GPU; the rest is the update's.")
    vllm_importance_sampling_correction: bool = Field(
        True, description="Weight each engine-drawn token's policy loss by the truncated "
        "importance ratio π_θ_old/μ (TIS; TRL's default), correcting for the engine's kernels "
        "and, with max_staleness > 0, its older weights (trainer/sampling_correction.py). "
        "False: the mismatch is only measured.")
    vllm_importance_sampling_mode: ImportanceSamplingMode = Field(
        "sequence_mask", description="TRL's modes: '*_truncate' clips the ratio to "
        "[clip_min, clip_max], '*_mask' drops the token or sequence outside it; 'token_*' is a "
        "ratio per token, 'sequence_*' one per completion (the product of its tokens').")
    vllm_importance_sampling_clip_max: float | None = Field(3.0, gt=0)
    vllm_importance_sampling_clip_min: float | None = Field(None, ge=0)
    max_staleness: int = Field(
        0, ge=0, description="Asynchronous GRPO: the engine draws the next steps' rollouts "
        "while this step's update runs, with weights up to this many optimizer steps old "
        "(TRL's AsyncGRPO, prime-rl's max_async_level); each sample's staleness is logged "
        "and corrected by the importance ratio. 0: the synchronous loop. Needs "
        "rollout_engine 'vllm'.")

    # --- a code tool (trainer/multiturn.py, trainer/tools.py) -------------------------------
    code_tool: bool = Field(False, description="Let the policy run Python while it writes "
                            "(tool-integrated reasoning, ToRL/SimpleTIR): a call stops the "
                            "turn, the sandbox runs it, its output comes back as a tool turn "
                            "(out of the loss and the KL) and generation goes on.")
    tool_format: Literal["auto", "template", "fenced"] = Field(
        "auto", description="'template': the chat template's own tool calls (Qwen2.5/Hermes "
        "<tool_call>); 'fenced': ```python blocks answered by ```output blocks (ToRL, "
        "SimpleTIR), for models without one; 'auto': the template's where it renders tools.")
    # stateless is the default: a session holds a sandbox container of its own for the whole
    # rollout, and the server lets one caller hold 4 (session_max_per_caller) -- a batch of
    # 32 rollouts would be refused (429) 28 times; /run_code takes a warm container per call
    # from the shared pool, and ToRL and SimpleTIR run each block fresh too.
    tool_state: ToolState = Field(
        "stateless", description="'stateless': each call a fresh program (POST /run_code); "
        "'session': one interpreter per rollout (/v1/sessions), variables kept across calls.")
    max_tool_turns: int = Field(4, ge=1, description="Calls a rollout may make (ToRL's C; "
                                "SimpleTIR allows 5 turns); past it a code block is text.")
    max_tool_output_chars: int = Field(512, ge=16, description="The tool output a policy "
                                       "reads: head and tail, the middle cut (SimpleTIR's "
                                       "512). Output counts against max_completion_length.")
    tool_run_timeout_s: float = Field(10.0, gt=0, description="A call's program time limit "
                                      "(SandboxFusion's run_timeout default).")
    tool_request_timeout_s: float = Field(60.0, gt=0, description="A call's HTTP limit "
                                          "(waits at the server's fair gate included); past "
                                          "it the call's result is an error text.")
    tool_url: str | None = Field(None, description="The server that runs calls; default: "
                                 "the first reward_url.")
    tool_concurrency: int = Field(64, ge=1, description="Calls in flight at once: a turn's "
                                  "calls go together, as the turn waits for its slowest.")

    # --- the update -------------------------------------------------------------------------
    num_iterations: int = Field(1, ge=1, description="μ: optimisation passes per batch "
                                "(GRPO paper); > 1 uses the sampling-time log-probs.")
    micro_batch_size: int = Field(8, ge=1, description="Completions per forward/backward.")
    disable_dropout: bool = Field(
        True, description="Set the model's own dropout to 0, as TRL's disable_dropout=True "
        "does: the update runs in training mode, and dropout would make π/π_old (μ > 1) and "
        "the KL compare two random sub-networks (a tiny GPT-2 with dropout 0.3 had ratios of "
        "0.76-1.31 before any update, which clipping then acted on). lora_dropout is kept.")
    share_prompts: bool = Field(
        True, description="Run each group's prompt once for its G completions, in sampling "
        "and in the update (trainer/prefix.py): the same log-probs and gradients, less work.")
    learning_rate: float = Field(1e-6, gt=0)
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up, in optimizer steps.")
    weight_decay: float = Field(
        0.0, ge=0, description="AdamW's decoupled weight decay; biases and norm weights are "
        "not decayed, as in transformers' Trainer (and TRL).")
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999  # TRL's GRPOConfig keeps TrainingArguments' (torch's) 0.999
    max_grad_norm: float = Field(1.0, gt=0)
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass: less memory, ~30% "
        "more compute (TRL turns it on by default).")
    beta: float = Field(0.0, ge=0, description="KL weight. 0 (TRL's default since DAPO/Dr. "
                        "GRPO): no reference model is kept in memory.")
    epsilon: float = Field(0.2, gt=0, description="PPO clip ε (epsilon_low).")
    epsilon_high: float | None = Field(None, gt=0, description="Upper clip; DAPO clip-higher "
                                       "uses 0.28. Default: epsilon.")
    loss_type: LossType = Field(
        "dapo", description="How the per-token loss is reduced (trainer/loss.py).")
    importance_sampling_level: ImportanceSamplingLevel = Field(
        "token", description="'sequence' is GSPO: one length-normalised ratio per sequence and "
        "a mean over sequences, so it needs loss_type 'grpo' (the default then).")
    scale_rewards: ScaleRewards = Field(
        "group", description="'none' is Dr. GRPO.")
    mask_truncated_completions: bool = Field(False, description="Exclude completions that hit "
                                             "max_completion_length from the loss (DAPO).")
    dynamic_sampling: bool = Field(False, description="Drop zero-std groups and sample more "
                                   "prompts (DAPO).")
    max_resample_rounds: int = Field(3, ge=0)

    # --- LoRA and distribution ---------------------------------------------------------------
    lora_r: int = Field(0, ge=0, description="LoRA rank (Hu et al. 2021) through peft; 0: full "
                        "fine-tuning. With LoRA the reference policy for β > 0 is the base with "
                        "the adapter off (no copy), and checkpoints hold the adapter only "
                        "(grpo-train --merge writes merged weights).")
    lora_alpha: float = Field(32.0, gt=0, description="LoRA scale α (updates scaled by α/r); "
                              "TRL's default.")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="0: the ratio π/π_old compares two "
                                "forwards of the same weights, and dropout would make them "
                                "differ.")
    lora_target_modules: str | list[str] = Field(
        "all-linear", description="Layers that get adapters: every linear layer of the blocks "
        "(QLoRA's choice; the head is left out), or a list of names such as [q_proj, v_proj].")
    distributed: Literal["ddp", "fsdp"] = Field(
        "ddp", description="Under torchrun: 'ddp' replicates the model on every rank; 'fsdp' "
        "(FSDP2, fully_shard) shards weights, gradients and optimizer state over the ranks, "
        "for models that do not fit one device.")

    # --- bookkeeping ------------------------------------------------------------------------
    seed: int = 0
    device: str = Field("auto", description="'auto': cuda if available, else cpu.")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="Compute dtype ('auto': bfloat16 on CUDA, float32 on CPU). Weights, "
        "gradients and AdamW stay float32 (master weights); bfloat16 runs the forward and "
        "backward under autocast, as TRL with bf16=True does.")
    save_every: int = Field(0, ge=0, description="Checkpoint every N steps (0: only at end).")
    eval_every: int = Field(0, ge=0, description="Evaluate every N steps (0: start and end).")
    eval_samples: int = Field(64, ge=1)
    report_to: list[Literal["tensorboard", "wandb"]] = Field(default_factory=list)
    progress_bar: bool = True
    # off by default as TRL's log_completions is: every item sent (a code item's tests too)
    log_rollouts: bool = Field(False, description="Append every scored item, its result and "
                               "what produced it (provenance) to <output_dir>/rollouts.jsonl "
                               "(rollouts-rank<r>.jsonl on other ranks), for reward-rescore.")

    @field_validator("reward_url", mode="before")
    @classmethod
    def _reward_urls(cls, value: Any) -> list[str]:
        """Every form a user writes (a flag's comma-separated text, a YAML string or list)
        becomes one list here, so that the scoring client and the code tool read the same
        servers and nothing downstream splits again."""
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(u, str) for u in items):
            raise ValueError("give a URL, URLs separated by commas, or a list of URLs")
        urls = [url for item in items for url in split_urls(item)]
        if not urls:
            raise ValueError("give at least one URL")
        for url in urls:
            if not _is_http_url(url):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return urls

    @field_validator("tool_url")
    @classmethod
    def _tool_url(cls, value: str | None) -> str | None:
        """One server, checked as ``reward_url``'s are: a typo fails at the start, not at
        the first tool call of the first step."""
        if value is not None and not _is_http_url(value.strip()):
            raise ValueError(f"{value!r} is not an http(s) URL (one server)")
        return None if value is None else value.strip()

    @model_validator(mode="after")
    def _check(self) -> GRPOConfig:
        if self.generation_chunk > self.prompts_per_step:
            self.generation_chunk = self.prompts_per_step
        if not self.rewards:
            raise ValueError("rewards: at least one verifier is needed")
        self._check_reward_names()
        self._check_overlong()
        self._check_datasets()
        if self.distributed == "fsdp" and self.dynamic_sampling:
            # FSDP ranks must run the same forwards; resampling rounds differ per rank
            raise ValueError("distributed 'fsdp' cannot use dynamic_sampling (ranks would "
                             "resample different numbers of rounds): use 'ddp'")
        self._check_engine()
        if self.distributed == "fsdp" and self.lora_r:
            raise ValueError("distributed 'fsdp' with lora_r > 0 is not supported: use 'ddp' "
                             "(the trainable adapter is small)")
        if self.importance_sampling_level == "sequence" and self.loss_type != "grpo":
            # GSPO (Zheng et al. 2025, eq. 5) averages over sequences; a token-sum reduction
            # would weight each sequence by its length, silently.
            if "loss_type" in self.model_fields_set:
                raise ValueError(f"importance_sampling_level 'sequence' (GSPO) averages the "
                                 f"loss over sequences: use loss_type 'grpo', not "
                                 f"{self.loss_type!r}")
            self.loss_type = "grpo"
        return self

    def _check_engine(self) -> None:
        if self.rollout_engine == "vllm" and self.temperature < VLLM_MIN_TEMPERATURE:
            # vLLM's SamplingParams raises any lower temperature to 0.01 without a word: the
            # engine would draw at another temperature than the loss divides the logits by
            raise ValueError(f"temperature {self.temperature} is below "
                             f"{VLLM_MIN_TEMPERATURE}, the lowest vLLM samples at (it draws at "
                             f"{VLLM_MIN_TEMPERATURE} instead): raise it, or set "
                             "rollout_engine: hf")
        if self.max_staleness and self.rollout_engine != "vllm":
            # generate() runs on the policy the update is changing: it cannot run ahead
            raise ValueError("max_staleness > 0 draws rollouts while the update runs, which "
                             "needs rollout_engine 'vllm' (the policy's own generate cannot)")
        if self.vllm_importance_sampling_clip_max is None:
            # a sequence's ratio is a product over its tokens: without a bound, one long
            # completion's weight is inf and the update NaN
            raise ValueError("vllm_importance_sampling_clip_max: the weights need an upper "
                             "bound (TRL's default is 3.0)")
        low, high = (self.vllm_importance_sampling_clip_min,
                     self.vllm_importance_sampling_clip_max)
        if low is not None and high is not None and low > high:
            raise ValueError(f"vllm_importance_sampling_clip_min ({low}) is above "
                             f"vllm_importance_sampling_clip_max ({high})")

    def _check_reward_names(self) -> None:
        """Each reward's metric column is its own: two specs of one verifier would write to
        the same rewards/<name>/* and one's scores would be lost."""
        labels = [spec.label for spec in self.rewards]
        if self.overlong_buffer is not None:
            labels.append(OVERLONG)
        for label in labels:
            if labels.count(label) > 1:
                hint = (" (the overlong penalty's)" if label == OVERLONG and
                        self.overlong_buffer is not None else "")
                raise ValueError(f"rewards: more than one reward is named {label!r}{hint}: "
                                 f"give each spec a distinct 'name'")

    def _check_overlong(self) -> None:
        buffer = self.overlong_buffer
        if buffer is None:
            return
        if buffer.max_length is not None and buffer.max_length > self.max_completion_length:
            raise ValueError(f"overlong_buffer.max_length ({buffer.max_length}) exceeds "
                             f"max_completion_length ({self.max_completion_length}): no "
                             f"completion could reach it")
        if buffer.len > self.overlong_max_length:
            raise ValueError(f"overlong_buffer.len ({buffer.len}) exceeds L_max "
                             f"({self.overlong_max_length})")

    def _check_datasets(self) -> None:
        named: set[str] = set()
        for source in (self.dataset, self.eval_dataset):
            if gym_tasks.is_gym(source):
                named.update(gym_tasks.parse_tasks(source))  # type: ignore[arg-type]
        stray = sorted(set(self.dataset_options) - named)
        if stray:
            raise ValueError(f"dataset_options: {stray[0]!r} is no reasoning_gym task of "
                             f"dataset or eval_dataset")

    @property
    def overlong_max_length(self) -> int:
        """L_max of the overlong penalty."""
        buffer = self.overlong_buffer
        if buffer is None or buffer.max_length is None:
            return self.max_completion_length
        return buffer.max_length

    @property
    def epsilon_low(self) -> float:
        return self.epsilon

    @property
    def epsilon_high_value(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


VLLM_MIN_TEMPERATURE = 0.01  # vllm.sampling_params._MAX_TEMP: a lower one is raised to it


class ConfigError(ValueError):
    """A config file or override that is not valid; the message is one readable line each."""


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    node = data
    *parents, leaf = dotted.split(".")
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: {key} is not a section")
    node[leaf] = value


def load_config(path: str | Path | None, overrides: list[str] = ()) -> GRPOConfig:
    """YAML file (optional) + ``key=value`` overrides (values parsed as YAML)."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}".splitlines()[0]) from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path} must hold a mapping of options")
        data = loaded or {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value")
        _set_path(data, key.strip(), yaml.safe_load(raw) if raw else "")
    try:
        return GRPOConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            if not err["loc"]:  # a check across options: its message names them
                lines.append(err["msg"].removeprefix("Value error, "))
                continue
            where = ".".join(str(p) for p in err["loc"])
            lines.append(f"{where}: {err['msg']}")
        raise ConfigError("; ".join(lines)) from None
