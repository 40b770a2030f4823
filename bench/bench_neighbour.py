"""A neighbour's ``/run_code`` beside a caller that loops ``/run_jupyter`` at its cap.

Caller A (the hostile one) keeps ``sandbox_session_max_per_caller`` trivial ``/run_jupyter``
runs in flight, each a fresh interpreter in a container of its own that is started and
removed for it. Caller B (the neighbour) posts a trivial ``/run_code`` print, one at a time.
Prints B's latency (median, p90, max) alone and beside A, and A's runs per second, and
writes JSON (date, commit, machine, figures) through ``bench/record.py``. Run it with another
checkout on ``PYTHONPATH`` to measure an older server the same way.

    python -m bench.bench_neighbour [--calls 60] [--pool 4] [--publish]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.record import commit, record
from reward_server.testing import PROXY_SETTINGS, A, B, as_caller, run_server, wait_for_sandbox

SNIPPET = {"code": "print('hello')", "language": "python"}
NOTEBOOK = {"cells": ["1 + 1"]}


def figures_of(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"median_s": round(statistics.median(ordered), 3), "p90_s": round(p90, 3),
            "max_s": round(ordered[-1], 3), "calls": len(ordered)}


def gate_wait_s(url: str) -> float:
    """B's seconds waited at the sandbox's gates so far (``reward_caller_queue_wait_seconds``)."""
    text = httpx.get(url + "/metrics", timeout=60).text
    prefix = f'reward_caller_queue_wait_seconds_sum{{caller="{B}"}} '
    return sum(float(line[len(prefix):]) for line in text.splitlines()
               if line.startswith(prefix))


def neighbour(url: str, calls: int) -> list[float]:
    """B's ``/run_code`` latencies, one call at a time."""
    samples = []
    with httpx.Client(base_url=url, timeout=600, headers=as_caller(B)) as c:
        for _ in range(calls):
            started = time.perf_counter()
            r = c.post("/run_code", json=SNIPPET)
            samples.append(time.perf_counter() - started)
            assert r.status_code == 200 and r.json()["status"] == "Success", r.text
    return samples


def hostile(url: str, stop: threading.Event, answers: Counter) -> None:
    """A's loop: one ``/run_jupyter`` after another until ``stop``."""
    with httpx.Client(base_url=url, timeout=600, headers=as_caller(A)) as c:
        while not stop.is_set():
            r = c.post("/run_jupyter", json=NOTEBOOK)
            answers[f"{r.status_code} {r.json().get('status', '')}"] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60, help="B's /run_code calls per phase")
    parser.add_argument("--pool", type=int, default=4, help="sandbox_pool_size")
    parser.add_argument("--per-caller", type=int, default=4,
                        help="sandbox_session_max_per_caller: A's runs in flight")
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()
    env = {**PROXY_SETTINGS, "REWARD_SERVER_SANDBOX_POOL_SIZE": str(args.pool),
           "REWARD_SERVER_SANDBOX_SESSION_MAX_PER_CALLER": str(args.per_caller)}
    figures: dict[str, Any] = {}
    with run_server(Path(tempfile.mkdtemp()), env=env) as srv:
        wait_for_sandbox(srv.url, timeout_s=300)
        neighbour(srv.url, 10)  # warm: every container has run a snippet
        waited = gate_wait_s(srv.url)
        figures["alone"] = figures_of(neighbour(srv.url, args.calls))
        figures["alone"]["mean_gate_wait_s"] = round(
            (gate_wait_s(srv.url) - waited) / args.calls, 3)
        stop, answers = threading.Event(), Counter()
        loops = [threading.Thread(target=hostile, args=(srv.url, stop, answers))
                 for _ in range(args.per_caller)]
        for loop in loops:
            loop.start()
        time.sleep(5)  # A at its cap, its containers coming and going
        started, before = time.perf_counter(), sum(answers.values())
        waited = gate_wait_s(srv.url)
        figures["beside_run_jupyter"] = figures_of(neighbour(srv.url, args.calls))
        # how much of B's latency was waiting for a turn (the rest: its run, slowed)
        figures["beside_run_jupyter"]["mean_gate_wait_s"] = round(
            (gate_wait_s(srv.url) - waited) / args.calls, 3)
        elapsed = time.perf_counter() - started
        figures["run_jupyter_runs_per_s"] = round((sum(answers.values()) - before) / elapsed, 2)
        stop.set()
        for loop in loops:
            loop.join()
        figures["run_jupyter_answers"] = dict(answers)
    print(json.dumps(figures, indent=2))
    path = record("bench_neighbour", figures, {
        "snippet": SNIPPET, "notebook": NOTEBOOK, "calls": args.calls,
        "pool_size": args.pool, "session_max_per_caller": args.per_caller,
        "cpus": os.cpu_count()}, publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
