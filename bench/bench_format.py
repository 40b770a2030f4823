"""The format verifier through the service against its rules in-process: items/s on the
same items.

The items: R1-style completions of about 1,500 characters (well formed, cut off while
thinking, tags doubled, no tags, the answer boxed or not), each held to ``think_answer``,
``tag_count`` and ``final_answer`` (boxed), in batches of ``--batch``; a second set adds a
caller's regex, which the service searches in its worker. In-process is what a trainer's
reward function would do: ``evaluate`` on validated items, in its own process (a regex
searched there unbounded). The service: the real server on loopback, its result cache off,
so every item is checked afresh; one request per batch, one at a time. The two are measured
in turn ``--repeats`` times and the medians reported. Each is measured in
wall-clock time and in CPU time (the bench's process, and the server's with its format
worker), after the server's other workers have finished warming up: on
a machine shared with other work the wall clock also counts the others' turns, and a request
that crosses two processes waits for more turns than a loop in one.

Writes JSON (date, commit, machine, figures) through ``bench/record.py``.

    python -m bench.bench_format [--batch 256] [--rounds 20] [--repeats 5] [--publish]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.costs import Cost, settle, timed
from bench.record import commit, record
from reward_server.testing import run_server
from reward_server.verifiers.format.evaluate import evaluate
from reward_server.verifiers.format.items import FormatItem

RULES: list[Any] = ["think_answer", "tag_count", {"rule": "final_answer", "pattern": "boxed"}]
REGEX = {"rule": "final_answer", "regex": r"\\boxed\{-?\d+\}", "after_think": False}
# batches before the clock starts: the server's other verifiers warm up their workers (SymPy,
# langdetect) on the same CPUs for seconds after it answers its first request
WARM_UP = 5
WORDS = ("so", "the", "sum", "is", "then", "we", "check", "each", "term", "and", "carry",
         "one", "wait", "let", "me", "recompute", "that", "step")


def completion(rng: random.Random) -> str:
    thought = " ".join(rng.choice(WORDS) for _ in range(280))  # ~1,500 characters
    answer = f"The total is \\boxed{{{rng.randint(-99, 999)}}}."
    shape = rng.randrange(5)
    if shape == 0:  # cut off while thinking
        return f"<think>\n{thought}"
    if shape == 1:  # the answer block twice
        return f"<think>\n{thought}\n</think>\n<answer>\n1\n</answer>\n<answer>\n{answer}\n</answer>"
    if shape == 2:  # no tags at all
        return f"{thought}\n{answer}"
    return f"<think>\n{thought}\n</think>\n<answer>\n{answer}\n</answer>"


def items(count: int, rules: list[Any], seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"response": completion(rng), "rules": rules} for _ in range(count)]


WORKERS = ("format-worker",)


def in_process(batch: list[dict[str, Any]], rounds: int) -> tuple[Cost, Cost]:
    """``rounds`` passes: on items validated once, and validating each pass."""
    validated = [FormatItem.model_validate(item) for item in batch]
    for item in validated:
        evaluate(item)
    local = timed(lambda: [evaluate(item) for _ in range(rounds) for item in validated])
    return local, timed(lambda: [evaluate(FormatItem.model_validate(raw))
                                 for _ in range(rounds) for raw in batch])


def served(client: httpx.Client, server: psutil.Process, batch: list[dict[str, Any]],
           rounds: int, first: bool) -> tuple[float, Cost, list[dict[str, Any]]]:
    """Seconds for the first batch (``first``: then ``WARM_UP`` more), for ``rounds``
    batches, and the last results."""
    body = json.dumps({"items": batch})

    def post() -> list[dict[str, Any]]:
        r = client.post("/v1/verify/format", content=body,
                        headers={"content-type": "application/json"})
        r.raise_for_status()
        return r.json()["results"]

    t0 = time.perf_counter()
    post()
    cold_s = time.perf_counter() - t0
    for _ in range(WARM_UP if first else 0):
        post()
    results: list[list[dict[str, Any]]] = []
    cost = timed(lambda: results.extend(post() for _ in range(rounds)), server, WORKERS)
    return cold_s, cost, results[-1]


def figures(n: int, local: tuple[Cost, Cost], service: tuple[float, Cost, list]
            ) -> dict[str, Any]:
    (alone, validating), (cold_s, served_, results) = local, service
    return {
        "items": n,
        "in_process_items_per_s": round(n / alone.wall_s, 1),
        "in_process_with_validation_items_per_s": round(n / validating.wall_s, 1),
        "service_items_per_s": round(n / served_.wall_s, 1),
        "service_over_in_process": round(served_.wall_s / alone.wall_s, 2),
        "service_over_in_process_with_validation": round(
            served_.wall_s / validating.wall_s, 2),
        "in_process_cpu_us_per_item": round(alone.cpu_s / n * 1e6, 1),
        "service_cpu_us_per_item": round(served_.cpu_s / n * 1e6, 1),
        "service_over_in_process_cpu": round(served_.cpu_s / alone.cpu_s, 2),
        "service_over_in_process_with_validation_cpu": round(
            served_.cpu_s / validating.cpu_s, 2),
        "first_batch_s": round(cold_s, 3),
        "last_batch_statuses": sorted({r["status"] for r in results}),
        "last_batch_mean_score": round(sum(r["score"] for r in results) / len(results), 4),
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the repeats, the ratios of every repeat, the first batch of
    the first repeat (a cold server) and the statuses of the last."""
    out = {key: statistics.median(run[key] for run in runs) for key in runs[0]
           if isinstance(runs[0][key], int | float)}
    out.update(first_batch_s=runs[0]["first_batch_s"],
               last_batch_statuses=runs[-1]["last_batch_statuses"],
               repeats={key: [run[key] for run in runs] for key in RATIOS})
    return out


RATIOS = ("service_over_in_process", "service_over_in_process_cpu",
          "service_over_in_process_with_validation",
          "service_over_in_process_with_validation_cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5, help="in-process and service "
                        "measured in turn this many times: the medians are the figures")
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()
    sets = {"built_in": items(args.batch, RULES), "with_regex": items(args.batch,
                                                                      [*RULES, REGEX])}
    n = args.batch * args.rounds
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sets}
    with run_server(Path(tempfile.mkdtemp()), env={"REWARD_SERVER_CACHE_SIZE": "0"},
                    startup_s=300) as srv, \
            httpx.Client(base_url=srv.url, timeout=600) as client:
        server = psutil.Process(srv.proc.pid)
        settle(server)
        for repeat in range(args.repeats):  # in turn: a change of load hits both sides
            for name, batch in sets.items():
                local = in_process(batch, args.rounds)
                service = served(client, server, batch, args.rounds, first=repeat == 0)
                runs[name].append(figures(n, local, service))
    out = {name: median_of(runs[name]) for name in sets}
    print(json.dumps(out, indent=2))
    path = record("bench_format", out, {"batch": args.batch, "rounds": args.rounds,
                                        "repeats": args.repeats,
                                        "rules_per_item": {"built_in": 3, "with_regex": 4},
                                        "response_chars": 1500, "cache": "off",
                                        "workers": 1, "cpus": os.cpu_count()},
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
