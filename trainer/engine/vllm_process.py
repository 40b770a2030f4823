"""The vLLM engine's own process: run by ``trainer.engine.client`` under the Python of the
environment vLLM is installed in (``scripts/setup_vllm.sh``: vLLM pins its own torch and
transformers, which need not be the trainer's), it imports nothing of the trainer but
``trainer.engine.wire``, and answers the trainer's requests one at a time on the
connection it is given.

Requests (dicts, ``op`` naming each): ``generate`` (G samples of each prompt's token ids, up
to a length of its own or one for all, each sampled token's log-prob under the engine),
``prompt_logprobs`` (a sequence's log-probs, teacher-forced: the check that the engine holds
the trainer's weights), ``load_weights`` (new weights from a safetensors file in shared
memory; answered with what the model took of them, which the trainer checks), ``close``.

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so new weights
are loaded by reference, with no second copy in another process.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Any

# forced, not defaulted: with the engine core in another process, the seed each draw sets
# here would not reach its sampler
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

from trainer.engine import wire  # noqa: E402 - after the environment vLLM reads at import


def _reload(worker: Any, path: str) -> dict[str, Any]:
    """Runs on vLLM's worker: the weights in ``path`` loaded in place, and what of them the
    model took (``_LoadRecord.report``). A tied output head (the embedding's weight, read
    by the head too) is repacked after its embedding is loaded: vLLM's CPU kernels keep a
    packed copy of the head, which ``reload_weights`` leaves stale where the checkpoint has
    no ``lm_head.weight`` of its own."""
    from safetensors.torch import load_file

    model = worker.model_runner.get_model()
    # trainer.engine.weights.tied_names' grouping, written out: this process runs a copy
    # of this module and the wire protocol alone, in vLLM's environment
    owners: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(parameter), []).append(name)
    weights = load_file(path)
    record = _LoadRecord(model)
    with record.watching():
        worker.model_runner.reload_weights(weights_iterator=record.feed(weights))
    for names in owners.values():
        for tied in names[1:]:
            module = model.get_submodule(tied.rpartition(".")[0])
            method = getattr(module, "quant_method", None)
            if method is not None:
                method.process_weights_after_loading(module)
    return record.report(weights)


class _LoadRecord:
    """Which staged weights ``reload_weights`` put into which of the model's parameters.

    vLLM (0.32) only logs a weight it skipped: a name its model does not have under a
    suffix it ignores (``.bias``), or a parameter the file has nothing for, which keeps
    its old value (or, a shard of a packed ``qkv_proj``/``gate_up_proj`` missing, is
    processed with the shard unwritten). Its layerwise reload counts what each weight
    loader call writes (``get_numel_loaded``); wrapped, each call is credited to the
    staged weight being loaded (the one the iterator last gave: models load each weight
    before they ask for the next) and to the parameter it writes, with the shard of a
    packed parameter it writes (``loaded_shard_id``): a checkpoint's ``q_proj`` goes into
    the engine's ``qkv_proj`` as shard ``q``."""

    def __init__(self, model: Any) -> None:
        self.model = model
        # the engine's parameters, a tied one under its first name (the head tied to the
        # embedding is the embedding's, which the staged file has and the head has not)
        self.expected = [name for name, _ in model.named_parameters()]
        self.current: str | None = None
        self.taken: set[str] = set()  # staged names a loader wrote from
        self.shards: dict[str, set[Any]] = {}  # engine parameter: shards written
        self._names: dict[int, str] = {}

    def feed(self, weights: dict[str, Any]) -> Any:
        for name, tensor in weights.items():
            self.current = name
            yield name, tensor
        self.current = None

    @contextmanager
    def watching(self) -> Any:
        from vllm.model_executor.model_loader.reload import layerwise

        counted = getattr(layerwise, "get_numel_loaded", None)
        if counted is None:  # another vLLM: a load it cannot check is refused, not trusted
            raise RuntimeError("this vLLM's reload_weights has no layerwise get_numel_loaded "
                               "to check loaded weights by (vLLM 0.32 has)")

        def credited(loader: Any, args: Any) -> Any:
            numel, value = counted(loader, args)
            if numel > 0:
                self._credit(args.arguments)
            return numel, value

        layerwise.get_numel_loaded = credited
        try:
            yield
        finally:
            layerwise.get_numel_loaded = counted

    def _credit(self, arguments: dict[str, Any]) -> None:
        if self.current is not None:
            self.taken.add(self.current)
        parameter = arguments.get("param")
        name = self._names.get(id(parameter))
        if name is None:  # in the reload, the parameters are stand-ins on the meta device
            self._names = {id(p): n for n, p in self.model.named_parameters()}
            name = self._names.get(id(parameter))
        if name is not None:
            shard = arguments.get("loaded_shard_id")  # a tuple: several shards at once
            self.shards.setdefault(name, set()).update(
                shard if isinstance(shard, tuple) else (shard,))

    def report(self, weights: dict[str, Any]) -> dict[str, Any]:
        """``weights``: how many were staged; ``not_loaded``: the staged names no parameter
        took; ``not_updated``: the parameters that took nothing, or some shards of a packed
        one and not the rest (as many as its module packs, ``output_sizes``)."""
        not_updated = []
        for name in self.expected:
            shards = self.shards.get(name)
            if not shards:
                not_updated.append(name)
                continue
            module = self.model.get_submodule(name.rpartition(".")[0])
            packed = len(getattr(module, "output_sizes", None) or ()) if None not in shards \
                else 0
            if len(shards) < packed:
                written = ", ".join(sorted(str(shard) for shard in shards))
                not_updated.append(f"{name} (shards {written} of {packed})")
        return {"weights": len(weights),
                "not_loaded": [name for name in weights if name not in self.taken],
                "not_updated": not_updated}


class Engine:
    """A ``vllm.LLM`` and the requests it answers."""

    def __init__(self, settings: dict[str, Any]) -> None:
        from vllm import LLM
        from vllm.platforms import current_platform

        block_size = settings["block_size"]
        if block_size is None and current_platform.is_cpu():
            # vLLM's CPU default is 128 tokens, and only whole blocks are cached: a prompt
            # shorter than that (most GRPO prompts) was prefilled again for each of its G
            # samples and each step, the chat template's shared system prompt included.
            # 32 is the least the CPU attention takes.
            block_size = 32
        self.llm = LLM(model=settings["model"], dtype=settings["dtype"], seed=settings["seed"],
                       block_size=block_size,
                       enforce_eager=settings["enforce_eager"], enable_prefix_caching=True,
                       max_model_len=settings["max_model_len"],
                       max_num_seqs=settings["max_num_seqs"],
                       gpu_memory_utilization=settings["gpu_memory_utilization"],
                       # token ids in and out: the trainer tokenizes and decodes; and no
                       # sampling defaults from the model's generation_config
                       skip_tokenizer_init=True, generation_config="vllm",
                       # a sampled token's log-prob under the distribution it was drawn
                       # from (temperature, top-k, top-p applied), as TRL asks for its
                       # importance-sampling correction
                       logprobs_mode="processed_logprobs", disable_log_stats=True)
        # one token drawn now: a model whose kernels this build lacks (vLLM's CPU attention
        # takes no head smaller than 32) fails at start, where the trainer says which
        # setting to change, not at the first step's draw
        self.generate([[0]], n=1, temperature=1.0, top_p=1.0, top_k=0, max_tokens=1,
                      stop_token_ids=[], greedy=True, seed=None)

    def generate(self, prompts: list[list[int]], n: int, temperature: float, top_p: float,
                 top_k: int, max_tokens: int | list[int],
                 stop_token_ids: list[int] | list[list[int]], greedy: bool, seed: int | None
                 ) -> list[list[dict[str, Any]]]:
        import torch
        from vllm import SamplingParams

        if seed is not None:
            # the engine core runs in this process, so its sampler draws from this
            # generator; a per-request seed would not do on a CPU, where vLLM rewinds a
            # seeded request's generator after a partial prefill and torch's CPU generator
            # cannot (RuntimeError: CPU Generator does not use offset)
            torch.manual_seed(seed)
        limits = _per_prompt(max_tokens, isinstance(max_tokens, list), prompts, "max_tokens")
        # a turn's stop ids depend on where the turn stands (trainer/engine/multiturn.py)
        stops = _per_prompt(stop_token_ids,
                            bool(stop_token_ids) and isinstance(stop_token_ids[0], list),
                            prompts, "stop_token_ids")
        # exactly the distribution the loss assumes: nothing the model's generation_config
        # says (repetition penalty, min_p) is applied; and a completion stops at the
        # trainer's stop ids alone (its EOS ids, the config's among them), kept in its tokens
        params = [SamplingParams(
            ignore_eos=True, n=n, temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else top_p, top_k=-1 if greedy or top_k == 0 else top_k,
            max_tokens=limit,
            stop_token_ids=stop, logprobs=0, detokenize=False,
            skip_special_tokens=False, repetition_penalty=1.0, min_p=0.0)
            for limit, stop in zip(limits, stops, strict=True)]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], params,
                                    use_tqdm=False)
        return [[{"token_ids": list(sample.token_ids),
                  "logprobs": [_sampled_logprob(step, token) for step, token in
                               zip(sample.logprobs or [], sample.token_ids, strict=True)],
                  "finish_reason": sample.finish_reason,
                  "cached_prompt_tokens": output.num_cached_tokens or 0}
                 for sample in output.outputs] for output in outputs]

    def prompt_logprobs(self, token_ids: list[int]) -> list[float]:
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0,
                                detokenize=False)
        output = self.llm.generate([{"prompt_token_ids": token_ids}], params, use_tqdm=False)[0]
        steps = output.prompt_logprobs or []
        return [_sampled_logprob(step, token)
                for step, token in zip(steps[1:], token_ids[1:], strict=True)]

    def load_weights(self, path: str) -> dict[str, Any]:
        report = self.llm.collective_rpc(_reload, args=(path,))[0]
        self.llm.reset_prefix_cache()  # prompt states computed by the old weights
        return report


def _per_prompt(value: Any, each: bool, prompts: list[list[int]], name: str) -> list[Any]:
    """``value`` for each prompt: the list given (``each``), one item per prompt, or one
    value for all."""
    if not each:
        return [value] * len(prompts)
    if len(value) != len(prompts):
        raise ValueError(f"{name}: {len(value)} values for {len(prompts)} prompts")
    return list(value)


def _sampled_logprob(step: Any, token: int) -> float:
    """The log-prob of ``token`` in one step's dict (vLLM adds the sampled token to the
    top-k it was asked for)."""
    return float(step[token].logprob)


def serve(connection: wire.Channel, engine: Engine) -> None:
    while True:
        try:
            request = connection.recv()
        except EOFError:  # the trainer is gone (it ended, or was killed): so is the engine
            return
        op = request.pop("op")
        if op == "close":
            connection.send({"ok": True})
            return
        try:
            value = getattr(engine, op)(**request)
            connection.send({"ok": True, "value": value})
        except Exception as exc:  # noqa: BLE001 - the trainer gets the error, the engine lives
            connection.send({"ok": False, "error": f"{type(exc).__name__}: {exc}",
                             "traceback": traceback.format_exc()})


def _exit_with_parent(every_s: float = 1.0) -> None:
    """Exits when the trainer is gone (this process is handed to another parent): between
    requests the closed connection says so, but not in the middle of a long one; on Linux
    the trainer also has the kernel kill this process when it dies."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def main(argv: list[str] | None = None) -> int:
    _exit_with_parent()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="the connection's descriptor")
    args = parser.parse_args(argv)
    connection = wire.Channel(args.fd)
    settings = connection.recv()
    try:
        engine = Engine(settings)
    except Exception as exc:  # noqa: BLE001 - said to the trainer as one line
        connection.send({"ok": False, "error": f"{type(exc).__name__}: {exc}",
                         "traceback": traceback.format_exc()})
        return 1
    connection.send({"ok": True})
    serve(connection, engine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
