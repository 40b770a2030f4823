"""The reasoning_gym verifier against the library in-process: items/s on the same items.

The items: every task's entries (seeded), each with its own answer and with a wrong one, in
``<answer>`` tags, in batches of ``--batch``. In-process is what a training recipe does: the
task's ``score_answer`` called in the trainer's own process (unguarded: it runs the answer as
code in nine tasks, docs/reasoning_gym.md). The service: the real server on loopback, its
result cache off, so every item is scored afresh; one request per batch, one at a time.

Writes JSON (date, commit, machine, figures) through ``bench/record.py``.

    python -m bench.bench_reasoning_gym [--batch 256] [--rounds 5] [--publish]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import httpx

from bench.record import commit, record
from reward_server.testing import run_server

ROOT = Path(__file__).resolve().parent.parent


def items(per_task: int) -> list[tuple[Any, dict[str, Any], str]]:
    """(dataset, entry, response) for every task but the composite one."""
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for task in sorted(set(DATASETS) - {"composite"}):
            dataset = reasoning_gym.create_dataset(task, size=per_task, seed=3)
            for i in range(per_task):
                entry = dataset[i]
                for answer in (entry["answer"], "not it"):
                    out.append((dataset, entry, f"reasoning...\n<answer>{answer}</answer>"))
    return out


def in_process(batch: list[tuple[Any, dict[str, Any], str]]) -> None:
    from reasoning_gym.utils import extract_answer

    for dataset, entry, response in batch:
        try:
            dataset.score_answer(extract_answer(response), entry)
        except Exception:  # noqa: BLE001 - a scorer that raises gives 0, as on the server
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-task", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()
    pool = items(args.per_task)
    batches = [pool[i:i + args.batch] for i in range(0, len(pool) - args.batch + 1, args.batch)]
    batches = (batches * args.rounds)[:args.rounds]
    bodies = [json.dumps({"items": [{"response": r, "entry": e} for _, e, r in b]},
                         default=str) for b in batches]

    in_process(batches[0])  # each task's dataset object and caches, as a trainer has them
    t0 = time.perf_counter()
    for batch in batches:
        in_process(batch)
    local_s = time.perf_counter() - t0

    env = {"REWARD_SERVER_CACHE_SIZE": "0",
           "REWARD_SERVER_REASONING_GYM_WORKERS": str(args.workers),
           "REWARD_SERVER_REASONING_GYM_CHUNK_ITEMS": str(args.chunk)}
    with run_server(Path(tempfile.mkdtemp()), env=env) as srv, \
            httpx.Client(base_url=srv.url, timeout=600) as client:
        def post(body: str) -> list[dict[str, Any]]:
            r = client.post("/v1/verify/reasoning_gym", content=body,
                            headers={"content-type": "application/json"})
            r.raise_for_status()
            return r.json()["results"]

        t0 = time.perf_counter()
        post(bodies[0])
        cold_s = time.perf_counter() - t0
        for _ in range(3):  # every worker builds each task's scorer once (arc_agi: 0.4 s)
            post(bodies[0])
        t0 = time.perf_counter()
        for body in bodies:
            results = post(body)
        served_s = time.perf_counter() - t0
    n = sum(len(b) for b in batches)
    figures = {
        "items": n, "in_process_items_per_s": round(n / local_s, 1),
        "service_items_per_s": round(n / served_s, 1),
        "service_over_in_process": round(served_s / local_s, 2),
        "first_batch_cold_s": round(cold_s, 2),
        "last_batch_statuses": sorted({r["status"] for r in results}),
    }
    print(json.dumps(figures, indent=2))
    path = record("reasoning_gym", figures, {"batch": args.batch, "rounds": args.rounds,
                                             "per_task": args.per_task, "workers": args.workers,
                                             "chunk_items": args.chunk,
                                             "cache": "off", "cpus": os.cpu_count()},
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
