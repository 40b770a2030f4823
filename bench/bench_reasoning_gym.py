"""The reasoning_gym verifier against the library in-process: items/s on the same items.

The items: every task's entries (seeded), each with its own answer and with a wrong one, in
``<answer>`` tags, in batches of ``--batch``, new ones each round and each repeat (a training
step's completions are new each step: a side that scored the same items again would find
SymPy's caches holding its answers). In-process is what a training recipe does: the
task's ``score_answer`` called in the trainer's own process (unguarded: it runs the answer as
code in nine tasks, docs/reasoning_gym.md). The service: the real server on loopback, its
result cache off, so every item is scored afresh, in the sandbox (``--containers`` warm
containers; the scorer's fork server forks a process per chunk there); one request per batch,
one at a time. The two are measured in turn ``--repeats`` times, in wall-clock and in CPU time
(``bench/costs.py``: this process and the server; plus the sandbox containers' CPU, from their
cgroups), and the medians reported.

Writes JSON (date, commit, machine, figures) through ``bench/record.py``.

    python -m bench.bench_reasoning_gym [--batch 256] [--rounds 10] [--repeats 5] [--publish]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.costs import Cost, settle, timed
from bench.record import commit, record
from reward_server.testing import run_server, sandbox_containers

ROOT = Path(__file__).resolve().parent.parent


def items(per_task: int, seed: int = 3) -> list[tuple[Any, dict[str, Any], str]]:
    """(dataset, entry, response) for every task but the composite one, shuffled (a batch
    holds every kind of task)."""
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for task in sorted(set(DATASETS) - {"composite"}):
            dataset = reasoning_gym.create_dataset(task, size=per_task, seed=seed)
            for i in range(per_task):
                entry = dataset[i]
                for answer in (entry["answer"], "not it"):
                    out.append((dataset, entry, f"reasoning...\n<answer>{answer}</answer>"))
    random.Random(seed).shuffle(out)
    return out


def fresh_batches(size: int, rounds: int, per_task: int, first_seed: int
                  ) -> list[list[tuple[Any, dict[str, Any], str]]]:
    """``rounds`` batches of items neither side has scored: a training step's completions
    are new every step, so neither SymPy's caches nor any other may answer a repeat."""
    return [items(per_task, seed=first_seed + r)[:size] for r in range(rounds)]


def in_process(batch: list[tuple[Any, dict[str, Any], str]]) -> None:
    from reasoning_gym.utils import extract_answer

    for dataset, entry, response in batch:
        try:
            dataset.score_answer(extract_answer(response), entry)
        except Exception:  # noqa: BLE001 - a scorer that raises gives 0, as on the server
            pass


def containers_cpu_s(server_pid: int) -> float:
    """CPU seconds the server's sandbox containers have used (their cgroups: v1's cpuacct or
    v2's cpu.stat), those alive now."""
    total = 0.0
    for container in sandbox_containers(server_pid):
        cid = container["id"]
        v1 = glob.glob(f"/sys/fs/cgroup/cpuacct/docker/{cid}*/cpuacct.usage")
        for path in v1:
            total += int(Path(path).read_text()) / 1e9
        for path in [] if v1 else glob.glob(f"/sys/fs/cgroup/**/*{cid}*/cpu.stat",
                                            recursive=True):
            text = Path(path).read_text()
            if "usage_usec " in text:
                total += int(text.split("usage_usec ", 1)[1].split()[0]) / 1e6
    return total


RATIOS = ("service_over_in_process", "service_over_in_process_cpu")


def figures(n: int, local: Cost, served: Cost) -> dict[str, float]:
    return {
        "in_process_items_per_s": round(n / local.wall_s, 1),
        "service_items_per_s": round(n / served.wall_s, 1),
        "service_over_in_process": round(served.wall_s / local.wall_s, 2),
        "in_process_cpu_us_per_item": round(local.cpu_s / n * 1e6, 1),
        "service_cpu_us_per_item": round(served.cpu_s / n * 1e6, 1),
        "service_over_in_process_cpu": round(served.cpu_s / local.cpu_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5, help="in-process and service "
                        "measured in turn this many times: the medians are the figures")
    parser.add_argument("--per-task", type=int, default=2)
    parser.add_argument("--containers", type=int, default=1,
                        help="warm sandbox containers (the scorer's processes run there)")
    parser.add_argument("--chunk", type=int, default=256)
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()
    # each repeat scores batches of its own on both sides, so that a side's second repeat
    # does not meet what its first scored
    warm, *rest = fresh_batches(args.batch, 1 + args.repeats * args.rounds, args.per_task, 100)
    per_repeat = [rest[k * args.rounds:(k + 1) * args.rounds] for k in range(args.repeats)]
    bodies = [[json.dumps({"items": [{"response": r, "entry": e} for _, e, r in b]},
                          default=str) for b in batches] for batches in per_repeat]
    warm_body = json.dumps({"items": [{"response": r, "entry": e} for _, e, r in warm]},
                           default=str)
    in_process(warm)  # each task's dataset object and caches, as a trainer has them

    env = {"REWARD_SERVER_CACHE_SIZE": "0",
           "REWARD_SERVER_REASONING_GYM_CHUNK_ITEMS": str(args.chunk)}
    env["REWARD_SERVER_SANDBOX_POOL_SIZE"] = str(args.containers)
    if "REWARD_SERVER_SANDBOX_IMAGE" in os.environ:  # run_server passes no other setting on
        env["REWARD_SERVER_SANDBOX_IMAGE"] = os.environ["REWARD_SERVER_SANDBOX_IMAGE"]
    runs: list[dict[str, float]] = []
    with run_server(Path(tempfile.mkdtemp()), env=env, startup_s=300) as srv, \
            httpx.Client(base_url=srv.url, timeout=600) as client:
        def post(body: str) -> list[dict[str, Any]]:
            r = client.post("/v1/verify/reasoning_gym", content=body,
                            headers={"content-type": "application/json"})
            r.raise_for_status()
            return r.json()["results"]

        t0 = time.perf_counter()
        post(warm_body)
        cold_s = time.perf_counter() - t0
        for _ in range(3):  # every container's scorer builds each task's once (arc_agi: 1 s)
            post(warm_body)
        server = psutil.Process(srv.proc.pid)
        settle(server)
        for batches, repeat_bodies in zip(per_repeat, bodies, strict=True):  # in turn: load hits both
            local = timed(lambda b=batches: [in_process(batch) for batch in b])
            inside = containers_cpu_s(srv.proc.pid)
            served = timed(lambda rb=repeat_bodies: [post(body) for body in rb], server)
            served = served._replace(cpu_s=served.cpu_s + containers_cpu_s(srv.proc.pid)
                                     - inside)
            runs.append(figures(sum(len(b) for b in batches), local, served))
        results = post(bodies[-1][-1])
    out: dict[str, Any] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    out.update(items=sum(len(b) for b in per_repeat[0]), first_batch_cold_s=round(cold_s, 2),
               last_batch_statuses=sorted({r["status"] for r in results}),
               repeats={key: [run[key] for run in runs] for key in RATIOS})
    print(json.dumps(out, indent=2))
    path = record("reasoning_gym", out, {"batch": args.batch, "rounds": args.rounds,
                                         "repeats": args.repeats, "per_task": args.per_task,
                                         "containers": args.containers,
                                         "scored_in": "sandbox",
                                         "chunk_items": args.chunk,
                                         "cache": "off", "items_each_round": "new",
                                         "cpus": os.cpu_count()},
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
