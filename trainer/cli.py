"""``grpo-train``: GRPO-train a model against a reward server.

    grpo-train --config examples/grpo_arithmetic.yaml --reward-url http://127.0.0.1:8000
    grpo-train --config cfg.yaml --set learning_rate=5e-6 --set loss_type=grpo
    grpo-train --config cfg.yaml --resume          # continue from the last checkpoint
    grpo-train --merge runs/x/checkpoint-000020    # LoRA: base + adapter -> plain weights

Under ``torchrun --nproc-per-node N`` it trains with DDP, or FSDP2 with ``distributed: fsdp``
(gloo on CPU, NCCL on GPU), prompts sharded over ranks, the G completions of a prompt kept on
one rank.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

# before anything imports torch (the config names its options from loss.py): else torch on
# CPU runs ~10x slower
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from trainer.config import ConfigError, GRPOConfig, load_config  # noqa: E402
from trainer.interrupt import Terminated, sigterm_as_interrupt, sigterm_count  # noqa: E402


def _options_help() -> str:
    lines = ["options of the config (YAML keys, or --set KEY=VALUE):"]
    for name, field in GRPOConfig.model_fields.items():
        default = field.default_factory() if field.default_factory else field.default
        if hasattr(default, "__iter__") and not isinstance(default, str):
            default = [d.model_dump() if hasattr(d, "model_dump") else d for d in default]
        about = f"  {field.description}" if field.description else ""
        lines.append(f"  {name} = {default!r}{about}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="grpo-train", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_options_help())
    ap.add_argument("--config", type=Path, help="YAML file of options (see below)")
    ap.add_argument("--reward-url", help="the reward server, or several separated by commas "
                    "(overrides reward_url)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override one option; repeatable; values are YAML")
    ap.add_argument("--resume", action="store_true",
                    help="continue from the latest checkpoint in output_dir")
    ap.add_argument("--merge", type=Path, metavar="CHECKPOINT",
                    help="write the base model with a LoRA checkpoint's adapter merged in, as "
                    "plain weights, and exit (the base: the run's config.json, or --config/--set)")
    ap.add_argument("--output", type=Path, help="where --merge writes (default: "
                    "CHECKPOINT-merged)")
    return ap.parse_args(argv)


def merge_main(args: argparse.Namespace) -> int:
    """``--merge``: base + adapter -> one plain Hugging Face folder."""
    from trainer.lora import merge

    model, seed = None, 0
    if args.config is not None or args.set:
        try:
            config = load_config(args.config, list(args.set))
        except ConfigError as exc:
            _say(str(exc))
            return 2
        model, seed = config.model, config.seed
    output = args.output or args.merge.with_name(args.merge.name + "-merged")
    try:
        merge(args.merge, output, model, seed)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        _say(f"--merge: {exc}")
        return 2
    print(f"merged weights written to {output}")
    return 0


def _engine_log(exc: Exception, output_dir: str | Path) -> str:
    """The engine's traceback into the run's folder, not the terminal: the user reads one
    line, and whoever debugs it has the whole trace. Returns the clause naming the file."""
    detail = getattr(exc, "detail", "")
    if not detail:
        return ""
    path = Path(output_dir) / "engine_error.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(detail)
    except OSError:
        return ""
    return f" (the engine's traceback: {path})"


def _say(text: str) -> None:
    """One ``grpo-train:`` line on stderr, written whole in one call: ``print`` writes the
    text and its newline apart, and under torchrun the ranks share one stderr, so two
    ranks' lines ran together on one line."""
    sys.stderr.write(f"grpo-train: {text}\n")
    sys.stderr.flush()


def _interrupted(exc: KeyboardInterrupt, step: int | None,
                 output_dir: str | Path | None) -> int:
    """One line for an interrupted run: where it stood and the checkpoint to resume from
    (none named in start-up, ``output_dir`` None); the exit code a shell gives a process
    the signal ended (128 + its number)."""
    signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
    where = "before training" if step is None else f"at step {step}"
    if output_dir is None:
        _say(f"interrupted ({signum.name}) {where}")
        return 128 + signum
    from trainer import checkpoint

    last = checkpoint.latest_checkpoint(Path(output_dir))
    saved = (f"the last checkpoint is {last} (continue with --resume)" if last is not None
             else "no checkpoint was written")
    _say(f"interrupted ({signum.name}) {where}; {saved}")
    return 128 + signum


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # in start-up, before the run's own handling is set
        return _interrupted(exc, None, None)


def _main(argv: list[str] | None) -> int:
    args = parse_args(argv)
    if args.merge is not None:
        return merge_main(args)
    overrides = list(args.set)
    if args.reward_url is not None:  # quoted: YAML reads the flag's text as one string
        overrides.append(f"reward_url={json.dumps(args.reward_url)}")
    try:
        config = load_config(args.config, overrides)
    except ConfigError as exc:
        _say(str(exc))
        return 2

    import torch
    import torch.distributed as dist

    from reward_server.client import RewardClient, RewardClientError
    from trainer import checkpoint
    from trainer.data import load_datasets
    from trainer.engine.client import EngineError
    from trainer.models import MASTER_DTYPE, load_model
    from trainer.train import GRPOTrainer, RankFailure, seed_everything

    trainer: GRPOTrainer | None = None
    if "RANK" in os.environ and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    # after the rendezvous: a Python handler runs only once the call in hand returns, so
    # one set before it left a rank waiting for a missing peer deaf to SIGTERM
    restore = sigterm_as_interrupt()
    try:
        last = checkpoint.latest_checkpoint(Path(config.output_dir)) if args.resume else None
        if args.resume and last is None:  # said before an engine starts for nothing
            _say(f"--resume: no checkpoint in {config.output_dir}")
            return 2
        seed_everything(config.seed)  # the same initial weights on every rank
        try:  # float32 master weights; dtype: bfloat16 is the compute dtype (autocast)
            model, tokenizer = load_model(config.model, MASTER_DTYPE, config.seed)
            train_rows, eval_rows = load_datasets(config)
        except (FileNotFoundError, ValueError, RuntimeError) as exc:
            _say(str(exc))
            return 2
        try:  # a wrong URL fails in seconds; an outage mid-run is waited out (retry_for_s)
            with RewardClient(config.reward_url, token=config.reward_token,
                              max_attempts=3) as probe:
                probe.health()
        except RewardClientError as exc:
            _say(f"reward server unavailable: {exc}")
            return 3
        client = RewardClient(config.reward_url, token=config.reward_token,
                              timeout=config.reward_timeout_s,
                              batch_size=config.reward_batch_size,
                              max_attempts=config.reward_max_attempts,
                              retry_for_s=config.reward_retry_for_s)
        try:
            trainer = GRPOTrainer(model, tokenizer, train_rows, config, client, eval_rows)
        except (EngineError, RankFailure) as exc:  # no vLLM, an engine that cannot start
            client.close()
            if sigterm_count():  # the SIGTERM sent to the whole job ended the engine too
                return _interrupted(Terminated(), None, config.output_dir)
            log = _engine_log(exc, config.output_dir) if isinstance(exc, EngineError) else ""
            _say(f"{exc}{log}")
            return 2
        try:
            if last is not None:
                try:  # the engine takes the checkpoint's weights: a request that can fail
                    trainer.resume(last)
                except KeyboardInterrupt as exc:  # the resume never finished
                    trainer.interrupted()  # its engine ended, not waited for
                    trainer.close()
                    return _interrupted(exc, None, config.output_dir)
                except BaseException as exc:
                    trainer.close()  # its engine and threads, as train() would have
                    if not isinstance(exc, EngineError):
                        raise
                    if sigterm_count():
                        return _interrupted(Terminated(), None, config.output_dir)
                    _say(f"--resume from {last}: {exc}"
                          f"{_engine_log(exc, config.output_dir)}")
                    return 3
                print(f"resumed from {last} at step {trainer.step}", flush=True)
            trainer.train()
        except (RewardClientError, EngineError, RankFailure) as exc:
            if sigterm_count():  # the SIGTERM sent to the whole job ended the engine too
                return _interrupted(Terminated(), trainer.step, config.output_dir)
            log = _engine_log(exc, config.output_dir) if isinstance(exc, EngineError) else ""
            _say(f"stopped at step {trainer.step}: {exc}; a checkpoint of step "
                  f"{trainer.step} is in {config.output_dir} (continue with --resume){log}")
            return 3
        finally:
            client.close()
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM
        return _interrupted(exc, None if trainer is None else trainer.step, config.output_dir)
    finally:
        restore()
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
