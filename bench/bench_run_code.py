"""``POST /run_code`` against ``docker run --rm`` of the same snippet in the same image: the
latency of a Python print, p50 and p99, at 1 and at 32 calls in flight.

``docker run --rm`` is what a sandbox without a warm pool pays per call (SandboxFusion's own
container per request, or a script around docker): a container created, started, the
interpreter run, the container removed. Both run the same print under the same image, in the
same run, on the same machine (``/run_code`` as a fork of the container's warm Python,
``docker run`` as ``python3 -c``); docker run with the pool's isolation flags that cost
nothing to set up (network none, read-only root, caps dropped).
The server runs its default pool (4 containers + 1 spare), its result cache irrelevant here
(snippets are never cached). Goal: /run_code's p50 at least 20x below docker run's.

Writes JSON (date, commit, machine, figures) through ``bench/record.py``.

    python -m bench.bench_run_code [--calls 200] [--docker-calls 20] [--publish]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.record import commit, record
from reward_server.testing import run_server, wait_for_sandbox
from sandbox.config import SandboxConfig

CODE = "print('hello from the sandbox')"
DOCKER_RUN = ["docker", "run", "--rm", "-i", "--network", "none", "--read-only",
              "--cap-drop", "ALL", "--entrypoint", "python3", SandboxConfig.image, "-c", CODE]


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2),
            "p99_ms": round(p99 * 1000, 2), "calls": len(ordered)}


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_code_latencies(client: httpx.Client, calls: int, in_flight: int) -> list[float]:
    def one() -> None:
        r = client.post("/run_code", json={"code": CODE, "language": "python"})
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "Success" and body["run_result"]["stdout"].startswith("hello"), body

    with ThreadPoolExecutor(in_flight) as pool:
        return list(pool.map(lambda _: timed(one), range(calls)))


def docker_run_latencies(calls: int, in_flight: int) -> list[float]:
    def one() -> None:
        out = subprocess.run(DOCKER_RUN, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0 and out.stdout.startswith("hello"), out.stderr

    with ThreadPoolExecutor(in_flight) as pool:
        return list(pool.map(lambda _: timed(one), range(calls)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="/run_code calls per level")
    parser.add_argument("--docker-calls", type=int, default=20, help="docker runs per level "
                        "(each costs about a second of the machine)")
    parser.add_argument("--publish", action="store_true")
    args = parser.parse_args()
    measured_on = commit()
    figures: dict[str, Any] = {}
    with run_server(Path(tempfile.mkdtemp())) as srv, \
            httpx.Client(base_url=srv.url, timeout=600,
                         limits=httpx.Limits(max_connections=64)) as client:
        wait_for_sandbox(srv.url)
        run_code_latencies(client, 20, 4)  # warm: every container has run a snippet
        for in_flight in (1, 32):
            figures[f"run_code_{in_flight}"] = percentiles(
                run_code_latencies(client, args.calls, in_flight))
    docker_run_latencies(1, 1)  # the image's layers in the page cache
    for in_flight in (1, 32):
        figures[f"docker_run_{in_flight}"] = percentiles(
            docker_run_latencies(max(args.docker_calls, in_flight), in_flight))
    for in_flight in (1, 32):
        figures[f"p50_speedup_{in_flight}"] = round(
            figures[f"docker_run_{in_flight}"]["p50_ms"]
            / figures[f"run_code_{in_flight}"]["p50_ms"], 1)
    figures["goal_p50_speedup"] = 20
    print(json.dumps(figures, indent=2))
    path = record("bench_run_code", figures, {
        "snippet": CODE, "language": "python", "calls": args.calls,
        "docker_calls": args.docker_calls, "pool_size": SandboxConfig.pool_size,
        "docker_run": " ".join(DOCKER_RUN), "cpus": os.cpu_count()},
        publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
