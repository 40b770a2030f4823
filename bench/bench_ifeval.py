"""The ifeval verifier through the service against its checks in-process: items/s on the
same items.

The items: the test table's responses (reward_server/verifiers/ifeval/labelled_cases.py, every
instruction, followed and not), each with its own instruction plus two more (number_words,
no_comma), strict and loose alternating, in batches of ``--batch``. In-process is what a
trainer's reward function would do: ``evaluate`` on the validated instructions, in its own
process. The service: the real server on loopback, its result cache off, so every item is
checked afresh; one request per batch, one at a time.

Writes JSON (date, commit, machine, figures) through ``bench/record.py``.

    python -m bench.bench_ifeval [--batch 256] [--rounds 20] [--publish]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.record import commit, record
from reward_server.testing import run_server
from reward_server.verifiers.ifeval.evaluate import evaluate
from reward_server.verifiers.ifeval.items import IfEvalItem
from reward_server.verifiers.ifeval.labelled_cases import CASES

ROOT = Path(__file__).resolve().parent.parent


EXTRA = [{"instruction_id": "length_constraints:number_words",
          "kwargs": {"relation": "at least", "num_words": 5}},
         {"instruction_id": "punctuation:no_comma"}]


def items(count: int) -> list[dict[str, Any]]:
    out = []
    while len(out) < count:
        for instruction_id, kwargs, response, _ in CASES:
            out.append({"response": response, "strict": len(out) % 2 == 0, "instructions": [
                {"instruction_id": instruction_id, "kwargs": kwargs}, *EXTRA]})
    return out[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()
    batch = items(args.batch)
    body = json.dumps({"items": batch})

    validated = [IfEvalItem.model_validate(item) for item in batch]
    for item in validated:  # langdetect's profiles load once, as in a trainer's process
        evaluate(item.response, item.specs, item.strict)
    t0 = time.perf_counter()
    for _ in range(args.rounds):
        for item in validated:
            evaluate(item.response, item.specs, item.strict)
    local_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(args.rounds):
        for item in batch:
            parsed = IfEvalItem.model_validate(item)
            evaluate(parsed.response, parsed.specs, parsed.strict)
    local_validated_s = time.perf_counter() - t0

    with run_server(Path(tempfile.mkdtemp()), env={"REWARD_SERVER_CACHE_SIZE": "0"}) as srv, \
            httpx.Client(base_url=srv.url, timeout=600) as client:
        def post() -> list[dict[str, Any]]:
            r = client.post("/v1/verify/ifeval", content=body,
                            headers={"content-type": "application/json"})
            r.raise_for_status()
            return r.json()["results"]

        t0 = time.perf_counter()
        post()
        cold_s = time.perf_counter() - t0
        post()
        t0 = time.perf_counter()
        for _ in range(args.rounds):
            results = post()
        served_s = time.perf_counter() - t0
    n = args.batch * args.rounds
    figures = {
        "items": n,
        "in_process_items_per_s": round(n / local_s, 1),
        "in_process_with_validation_items_per_s": round(n / local_validated_s, 1),
        "service_items_per_s": round(n / served_s, 1),
        "service_over_in_process": round(served_s / local_s, 2),
        "service_over_in_process_with_validation": round(served_s / local_validated_s, 2),
        "first_batch_s": round(cold_s, 3),
        "last_batch_statuses": sorted({r["status"] for r in results}),
    }
    print(json.dumps(figures, indent=2))
    path = record("bench_ifeval", figures, {"batch": args.batch, "rounds": args.rounds,
                                            "instructions_per_item": 3, "cache": "off",
                                            "cpus": os.cpu_count()},
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
