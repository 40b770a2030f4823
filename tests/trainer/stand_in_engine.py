"""A stand-in for ``trainer.engine.vllm_process`` that draws random tokens, for runs of the
whole trainer (``grpo-train``) without vLLM; run as ``vllm_python`` through a shell script
(``stand_in_python``). ``STAND_IN_DIR`` is where it says what it does: ``engine-<rank>.pid``
once started, ``<op>-<rank>-<n>`` as it takes its n-th request of an op (from 1). What it
does wrong is set by ``STAND_IN_<WHAT>=<n>`` on the n-th such request, on every rank or on
``STAND_IN_RANK`` alone: ``HANG_GENERATE``, ``HANG_LOAD`` (never answer), ``DIE_GENERATE``
(exit 7), ``FAIL_LOAD`` (answer with an error, from the n-th on), ``SKIP_LOAD`` (say, from the n-th
on, that a weight under a prefixed name was not loaded, as ``vllm_process`` reports it),
``FAIL_START=1`` (refuse to start), ``SKIP_START_LOAD=1`` (say that the start's own weights
were loaded in part, when the client checks them). Its first ``load_weights`` is that check,
``start_check-<rank>``; the syncs are counted from the next."""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

from trainer.engine import wire


def _at(what: str, count: int) -> bool:
    """Whether this request is the one ``STAND_IN_<what>`` names, on this rank."""
    wanted = os.environ.get(f"STAND_IN_{what}")
    rank = os.environ.get("STAND_IN_RANK")
    if wanted is None or (rank is not None and rank != os.environ.get("RANK", "0")):
        return False
    return count >= int(wanted) if what in ("FAIL_LOAD", "SKIP_LOAD") \
        else count == int(wanted)


def _sample(request: dict, rng: random.Random) -> list[list[dict]]:
    limits = request["max_tokens"]
    out = []
    for k, _ in enumerate(request["prompts"]):
        limit = limits[k] if isinstance(limits, list) else limits
        group = []
        for _ in range(request["n"]):
            tokens = [rng.randint(3, 20) for _ in range(rng.randint(1, limit))]
            group.append({"token_ids": tokens, "logprobs": [-1.0] * len(tokens),
                          "finish_reason": "length", "cached_prompt_tokens": 0})
        out.append(group)
    return out


def main() -> None:
    folder = Path(os.environ["STAND_IN_DIR"])
    rank = os.environ.get("RANK", "0")
    connection = wire.Channel(int(sys.argv[sys.argv.index("--fd") + 1]))
    connection.recv()
    if _at("FAIL_START", 1):
        connection.send({"ok": False, "error": "RuntimeError: no room for the model"})
        sys.exit(1)
    (folder / f"engine-{rank}.pid").write_text(str(os.getpid()))
    connection.send({"ok": True})
    counts: dict[str, int] = {}
    started = False
    while True:
        try:
            request = connection.recv()
        except EOFError:
            sys.exit(0)
        op = request.pop("op")
        if op == "close":
            connection.send({"ok": True})
            sys.exit(0)
        if op == "load_weights" and not started:
            # the client's check of the start's own weights: a sync is counted from the next
            started = True
            (folder / f"start_check-{rank}").touch()
            value = {"weights": 20, "not_loaded": [], "not_updated": []}
            if _at("SKIP_START_LOAD", 1):
                value.update(not_loaded=["model.layers.0.mlp.down_proj.bias"])
            connection.send({"ok": True, "value": value})
            continue
        counts[op] = count = counts.get(op, 0) + 1
        (folder / f"{op}-{rank}-{count}").touch()
        if op == "generate" and _at("DIE_GENERATE", count):
            os._exit(7)
        if (op == "generate" and _at("HANG_GENERATE", count)) or \
                (op == "load_weights" and _at("HANG_LOAD", count)):
            time.sleep(3600)
        if op == "load_weights" and _at("FAIL_LOAD", count):
            connection.send({"ok": False, "error": "RuntimeError: load failed"})
            continue
        value = (_sample(request, random.Random(request.get("seed"))) if op == "generate"
                 else {"weights": 20, "not_loaded": [], "not_updated": []})
        if op == "load_weights" and _at("SKIP_LOAD", count):
            value.update(not_loaded=["_orig_mod.model.norm.weight"],
                         not_updated=["model.norm.weight"])
        connection.send({"ok": True, "value": value})


if __name__ == "__main__":
    main()
