"""What the gVisor pids-headroom check costs (sandbox/pool.py: a ``docker stats`` read after
each execution, beside the next one): the same warm gVisor pool, in one process, with the
check and with it switched off, in alternating blocks. Rows: trivial items 4 in flight
(executions/s) and 10-test items one in flight (p50 latency). Prints a table and writes
JSON (date, commit, machine, figures) through ``bench/record.py``.

    python -m bench.bench_gvisor_headroom [--rounds 3] [--publish]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from bench.record import commit, record
from sandbox.config import SandboxConfig
from sandbox.pool import ContainerPool, PooledContainer
from sandbox.runner import Execution, Sandbox, TestCase
from sandbox.testing import runsc_engine

ROOT = Path(__file__).resolve().parent.parent


SUM = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)"
WORKLOADS = {  # name: (execution, count, in flight)
    "trivial, 4 in flight": (Execution("python", "print(1)", (TestCase("", "1"),)), 40, 4),
    "10 tests, 1 in flight": (
        Execution("python", SUM, tuple(TestCase(f"{k} {k}", str(2 * k)) for k in range(10))),
        10, 1),
}


async def _no_check(self: ContainerPool, pooled: PooledContainer) -> None:
    pooled.checking = False


async def block(sb: Sandbox, ex: Execution, n: int, in_flight: int) -> tuple[float, float]:
    """Executions per second and p50 latency (ms) of ``n`` executions."""
    latencies: list[float] = []

    async def one() -> None:
        t = time.perf_counter()
        result = await sb.execute(ex)
        latencies.append(time.perf_counter() - t)
        assert all(x.status == "passed" for x in result.tests), result

    started = time.perf_counter()
    for _ in range(0, n, in_flight):
        await asyncio.gather(*(one() for _ in range(in_flight)))
    return n / (time.perf_counter() - started), statistics.median(latencies) * 1000


async def measure(host: str, rounds: int) -> dict[str, dict[str, list[tuple[float, float]]]]:
    check = ContainerPool._check_headroom
    rows: dict[str, dict[str, list[tuple[float, float]]]] = {
        mode: {name: [] for name in WORKLOADS} for mode in ("check", "no check")}
    sb = Sandbox(SandboxConfig(docker_host=host, runtime="runsc", pool_size=4))
    await sb.start()
    try:
        while sb.pool.idle < 4:
            await asyncio.sleep(0.5)
        for _ in range(rounds):
            for mode in rows:
                ContainerPool._check_headroom = check if mode == "check" else _no_check
                for name, (ex, n, in_flight) in WORKLOADS.items():
                    rows[mode][name].append(await block(sb, ex, n, in_flight))
    finally:
        ContainerPool._check_headroom = check
        await sb.stop()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/bench_gvisor_headroom.json")
    args = ap.parse_args()
    measured_on = commit()
    with runsc_engine() as engine:
        rows = asyncio.run(measure(engine.host, args.rounds))
    print(f"\nmedian of {args.rounds} alternating blocks\n")
    print(f"{'':32} {'exec/s':>8} {'p50 ms':>8}")
    figures: dict[str, dict[str, float]] = {}
    for mode, workloads in rows.items():
        for name, runs in workloads.items():
            figures[f"{mode}, {name}"] = {
                "exec_s": round(statistics.median(r[0] for r in runs), 2),
                "p50_ms": round(statistics.median(r[1] for r in runs), 1)}
            row = figures[f"{mode}, {name}"]
            print(f"{mode + ', ' + name:32} {row['exec_s']:8.1f} {row['p50_ms']:8.0f}")
    path = record("bench_gvisor_headroom", figures, {"rounds": args.rounds, "pool_size": 4},
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
