"""Session cells (``POST /v1/sessions/{id}/run``) against ``POST /run_code`` of the same small
step, in the same run: p50 and p99 of a cell in one session, and of cells in several
sessions at once, and what opening a session costs.

The step is a counter kept in the interpreter (``n += 1; n``); /run_code, which keeps
nothing, runs a print of a constant, its nearest one-shot equivalent. A cell pays one round
trip to an interpreter already running; a /run_code call starts a Python process per call:
the ratio is what keeping the interpreter saves a multi-step rollout per step.

Writes JSON (date, commit, machine, figures) through ``bench/record.py``.

    python -m bench.bench_sessions [--cells 200] [--sessions 4] [--publish]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.bench_run_code import percentiles, timed
from bench.record import commit, record
from reward_server.testing import run_server, wait_for_sandbox

CELL = "n += 1\nn"
ONE_SHOT = "print(1)"


def cell_latencies(client: httpx.Client, session_id: str, cells: int) -> list[float]:
    def one(expected: int) -> None:
        r = client.post(f"/v1/sessions/{session_id}/run", json={"code": CELL})
        body = r.json()
        assert body["status"] == "Success", body
        assert body["cells"][0]["display"][0]["text/plain"] == str(expected), body

    client.post(f"/v1/sessions/{session_id}/run", json={"code": "n = 0"}).raise_for_status()
    return [timed(lambda i=i: one(i)) for i in range(1, cells + 1)]


def run_code_latencies(client: httpx.Client, calls: int) -> list[float]:
    def one() -> None:
        body = client.post("/run_code", json={"code": ONE_SHOT, "language": "python"}).json()
        assert body["status"] == "Success", body

    return [timed(one) for _ in range(calls)]


def open_session(client: httpx.Client) -> tuple[str, float]:
    started = time.perf_counter()
    r = client.post("/v1/sessions", json={})
    r.raise_for_status()
    return r.json()["session_id"], time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=200, help="cells per session")
    parser.add_argument("--sessions", type=int, default=4, help="sessions run at once")
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()
    figures: dict[str, Any] = {}
    env = {"REWARD_SERVER_SANDBOX_SESSION_MAX_PER_CALLER": str(args.sessions + 1)}
    with run_server(Path(tempfile.mkdtemp()), env=env, startup_s=180) as srv, \
            httpx.Client(base_url=srv.url, timeout=600,
                         limits=httpx.Limits(max_connections=64)) as client:
        wait_for_sandbox(srv.url)
        run_code_latencies(client, 20)  # warm
        figures["run_code_1"] = percentiles(run_code_latencies(client, args.cells))
        ids, opened = zip(*(open_session(client) for _ in range(args.sessions)), strict=True)
        figures["open_session"] = percentiles(list(opened))
        cell_latencies(client, ids[0], 20)  # warm
        figures["cell_1"] = percentiles(cell_latencies(client, ids[0], args.cells))
        with ThreadPoolExecutor(len(ids)) as pool:
            parallel = pool.map(lambda i: cell_latencies(client, i, args.cells), ids)
            figures[f"cell_{len(ids)}_sessions"] = percentiles(
                [s for samples in parallel for s in samples])
        for session_id in ids:
            client.delete(f"/v1/sessions/{session_id}")
    figures["p50_speedup_over_run_code"] = round(
        figures["run_code_1"]["p50_ms"] / figures["cell_1"]["p50_ms"], 1)
    print(json.dumps(figures, indent=2))
    path = record("bench_sessions", figures, {
        "cell": CELL, "run_code": ONE_SHOT, "cells": args.cells, "sessions": args.sessions,
        "cpus": os.cpu_count()}, publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
