"""Sustained load: N concurrent clients for D seconds, each sending GRPO-shaped batches (a
group of 16 completions of one problem) of math and code, against one reward server.

Reports throughput, request latency p50/p99, errors (a non-200, a null reward, or a score
different from the one the item was built to have: zero is the goal), the server's RSS (the
whole process tree) before and after and sampled during the run, and the sandbox containers
the server left behind after it stopped. Each problem recurs (a run repeats prompts across
steps), so the cache serves part of the load, as it does in training.

``--hostile 1`` adds the fairness scenario: after the all-honest run, the same
server gets one hostile client among 15 honest ones. The hostile client sends batches of the
same shape whose items are all slow (towers of exponents that run into the math time limit,
programs that sleep through every test), distinct so that no cache helps. It reports the
honest clients' p50/p99 next to the all-honest run's; the goal is honest p99 within 2x.

Writes JSON (date, commit, machine, figures) through ``bench/record.py``: ``bench_load``
(``_nocache`` with the cache off, ``_hostile`` with ``--hostile``), or ``bench_load_soak``.

    python -m bench.bench_load [--clients 16] [--duration 60] [--code-share 0.25]
                               [--workers 1] [--cache-size 100000] [--hostile 1]
                               [--url URL (an already running server)] [--publish]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent

GROUP = 16


@dataclass
class Report:
    clients: int
    duration_s: float
    requests: int = 0
    items: int = 0
    code_items: int = 0
    errors: int = 0
    error_examples: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    code_latencies_ms: list[float] = field(default_factory=list)  # the code batches' alone
    rss_mb: list[tuple[float, float]] = field(default_factory=list)  # (t, MB)
    # every ``sample_s``: the server's RSS, its processes (math workers) and containers, and
    # the requests and errors so far: what a soak looks at for a leak
    samples: list[dict] = field(default_factory=list)
    hostile: Report | None = None  # the hostile clients' own figures, when there are any

    def percentile(self, q: float, latencies: list[float] | None = None) -> float:
        ordered = sorted(self.latencies_ms if latencies is None else latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    def summary(self) -> dict:
        out = {k: v for k, v in asdict(self).items()
               if k not in ("latencies_ms", "code_latencies_ms", "rss_mb", "hostile",
                            "samples")}
        math_ms = sorted(self.latencies_ms)
        for ms in self.code_latencies_ms:
            math_ms.remove(ms)
        out.update(items_per_s=self.items / self.duration_s,
                   requests_per_s=self.requests / self.duration_s,
                   p50_ms=self.percentile(0.5), p99_ms=self.percentile(0.99),
                   math_p99_ms=self.percentile(0.99, math_ms),
                   code_p99_ms=self.percentile(0.99, self.code_latencies_ms),
                   rss_first_mb=self.rss_mb[0][1] if self.rss_mb else None,
                   rss_last_mb=self.rss_mb[-1][1] if self.rss_mb else None,
                   rss_max_mb=max((m for _, m in self.rss_mb), default=None))
        return out


def math_group(rng: random.Random) -> tuple[list[dict], list[float]]:
    """One problem, 16 sampled answers: right in several forms, wrong, unparseable; plain
    numbers take the fast path, the rest a math worker."""
    p, q = rng.randint(1, 60), rng.randint(2, 60)
    answer = f"\\frac{{{p}}}{{{q}}}"
    forms = [(f"so the answer is \\boxed{{\\frac{{{p}}}{{{q}}}}}", 1.0),
             (f"\\boxed{{{p}/{q}}}", 1.0),
             (f"\\boxed{{\\frac{{{2 * p}}}{{{2 * q}}}}}", 1.0),
             (f"\\boxed{{({p}/{q})}}", 1.0),  # not a plain number: a math worker's job
             (f"\\boxed{{\\frac{{{p + 1}}}{{{q}}}}}", 0.0),
             (f"\\boxed{{{p} \\div {q + 1}}}", 0.0),  # a worker's job too
             (f"#### {p * q}", 0.0),
             ("I am not sure.", 0.0)]
    items, expected = [], []
    for _ in range(GROUP):
        response, score = rng.choice(forms)
        items.append({"verifier": "math", "response": response, "answer": answer})
        expected.append(score)
    return items, expected


CORRECT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
WRONG = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"
BROKEN = "```python\nprint(\n```"


def code_group(rng: random.Random) -> tuple[list[dict], list[float]]:
    a, b = rng.randint(1, 30), rng.randint(1, 30)  # 900 problems: some recur, most do not
    tests = [{"input": f"{a} {b}", "output": str(a + b)},
             {"input": f"{b} {a + 5}", "output": str(a + b + 5)}]
    items, expected = [], []
    for _ in range(GROUP):
        response, score = rng.choice([(CORRECT, 1.0), (CORRECT, 1.0), (WRONG, 0.0),
                                      (BROKEN, 0.0)])
        items.append({"verifier": "code", "response": response, "tests": tests})
        expected.append(score)
    return items, expected


def hostile_math_group(rng: random.Random) -> tuple[list[dict], None]:
    """16 distinct towers of exponents: SymPy evaluates each until the time limit."""
    items = []
    for _ in range(GROUP):
        a, b, c, d = rng.randint(3, 9), rng.randint(3, 9), rng.randint(3, 9), rng.randint(5, 9)
        items.append({"verifier": "math", "response": f"\\boxed{{{a}^{{{b}^{{{c}^{{{d}}}}}}}}}",
                      "answer": str(rng.randint(1, 99))})
    return items, None


def hostile_code_group(rng: random.Random) -> tuple[list[dict], None]:
    """16 distinct programs that sleep through both tests (each test to its time limit)."""
    tests = [{"input": "1 2", "output": "3"}, {"input": "2 3", "output": "5"}]
    items = [{"verifier": "code", "tests": tests,
              "response": f"```python\nimport time  # {rng.getrandbits(64)}\ntime.sleep(60)\n```"}
             for _ in range(GROUP)]
    return items, None


async def client_loop(url: str, seed: int, stop_at: float, code_share: float,
                      report: Report, hostile: bool = False) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        while time.monotonic() < stop_at:
            is_code = rng.random() < code_share
            if hostile:
                items, expected = (hostile_code_group if is_code else hostile_math_group)(rng)
            else:
                items, expected = (code_group if is_code else math_group)(rng)
            t0 = time.perf_counter()
            try:
                r = await http.post("/v1/rewards", json={"items": items})
            except httpx.HTTPError as exc:
                report.errors += 1
                report.error_examples.append(f"{type(exc).__name__}: {exc}"[:200])
                continue
            report.latencies_ms.append((time.perf_counter() - t0) * 1000)
            if is_code:
                report.code_latencies_ms.append(report.latencies_ms[-1])
            report.requests += 1
            report.items += len(items)
            report.code_items += len(items) if is_code else 0
            if r.status_code != 200:
                report.errors += 1
                report.error_examples.append(f"HTTP {r.status_code}: {r.text[:150]}")
                continue
            got = r.json()["rewards"]
            if expected is None:  # hostile: any verdict, as long as each item has one
                if len(got) != len(items):
                    report.errors += 1
                    report.error_examples.append(f"{len(got)} rewards for {len(items)} items")
                continue
            bad = [(g, e, res["status"], (res.get("detail") or "")[:80])
                   for g, e, res in zip(got, expected, r.json()["results"], strict=True)
                   if g != e]
            if bad:
                report.errors += 1
                report.error_examples.append(f"scores {bad[:3]} for {items[0]['verifier']}")


def tree_rss_mb(pid: int) -> float:
    import psutil

    from bench.costs import tree_rss_mb as of_tree

    try:
        return of_tree(psutil.Process(pid))
    except psutil.Error:
        return 0.0


def tree_processes(pid: int) -> int:
    import psutil

    try:
        return len(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return 0


def server_sample(pid: int, t_s: float, report: Report) -> dict:
    from reward_server.testing import sandbox_containers

    return {"t_s": round(t_s, 1), "rss_mb": round(tree_rss_mb(pid), 1),
            "processes": tree_processes(pid), "containers": len(sandbox_containers(pid)),
            "requests": report.requests, "errors": report.errors}


async def run_load(url: str, clients: int, duration_s: float, code_share: float,
                   server_pid: int | None = None, seed: int = 0, hostile: int = 0,
                   sample_s: float | None = None) -> Report:
    """``clients`` in all, ``hostile`` of them hostile; the report is the honest clients'
    (the hostile clients' in ``report.hostile``)."""
    report = Report(clients=clients - hostile, duration_s=duration_s)
    report.hostile = Report(clients=hostile, duration_s=duration_s)
    started = time.monotonic()
    stop_at = started + duration_s

    async def sample_rss() -> None:
        while server_pid is not None and time.monotonic() < stop_at:
            now = time.monotonic() - started
            report.rss_mb.append((now, tree_rss_mb(server_pid)))
            if sample_s is not None:
                report.samples.append(await asyncio.to_thread(
                    server_sample, server_pid, now, report))
            await asyncio.sleep(sample_s or max(1.0, duration_s / 20))

    sampler = asyncio.create_task(sample_rss())
    await asyncio.gather(*(client_loop(url, seed * 1000 + k, stop_at, code_share,
                                       report.hostile if k < hostile else report, k < hostile)
                           for k in range(clients)))
    sampler.cancel()
    if server_pid is not None:
        report.rss_mb.append((time.monotonic() - started, tree_rss_mb(server_pid)))
        if sample_s is not None:
            report.samples.append(server_sample(server_pid, time.monotonic() - started, report))
    report.duration_s = report.hostile.duration_s = time.monotonic() - started
    return report


def print_report(title: str, report: Report) -> dict:
    s = report.summary()
    print(title)
    print(f"  requests      {s['requests']}  ({s['requests_per_s']:.1f}/s)")
    print(f"  items         {s['items']}  ({s['items_per_s']:.1f}/s; {s['code_items']} code)")
    print(f"  latency       p50 {s['p50_ms']:.0f} ms   p99 {s['p99_ms']:.0f} ms   (p99 of math "
          f"batches {s['math_p99_ms']:.0f} ms, of code batches {s['code_p99_ms']:.0f} ms)")
    print(f"  errors        {s['errors']}")
    for example in report.error_examples[:5]:
        print(f"    {example}")
    if report.rss_mb:
        print(f"  server RSS    {s['rss_first_mb']:.0f} MB at start, {s['rss_last_mb']:.0f} MB "
              f"at end, {s['rss_max_mb']:.0f} MB max (process tree)")
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--code-share", type=float, default=0.25)
    ap.add_argument("--workers", type=int, default=1, help="uvicorn workers")
    ap.add_argument("--pool-size", type=int, default=4, help="sandbox containers per worker")
    ap.add_argument("--cache-size", type=int, default=100_000,
                    help="result-cache entries per worker (0: off, so every item is computed)")
    ap.add_argument("--hostile", type=int, default=0,
                    help="then a second run with this many of the clients hostile")
    ap.add_argument("--url", help="an already running server (no RSS or container figures)")
    ap.add_argument("--soak-minutes", type=float, default=None,
                    help="a soak instead: one run this long, the server's RSS, processes and "
                    "containers sampled every minute (bench/results/bench_load_soak-*.json)")
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/<bench>.json (the figures the docs show)")
    args = ap.parse_args()
    if args.soak_minutes is not None:
        return soak(args)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    from bench.record import commit, record
    from reward_server.testing import run_server, sandbox_containers, wait_for_sandbox

    def runs(url: str, pid: int | None) -> list[Report]:
        done = [asyncio.run(run_load(url, args.clients, args.duration, args.code_share, pid))]
        if args.hostile:
            done.append(asyncio.run(run_load(url, args.clients, args.duration,
                                             args.code_share, pid, hostile=args.hostile)))
        return done

    measured_on = commit()
    if args.url:
        reports = runs(args.url, None)
        leaked = None
    else:
        import tempfile

        env = {"REWARD_SERVER_WORKERS": str(args.workers), "REWARD_SERVER_MATH_WORKERS": "0",
               "REWARD_SERVER_SANDBOX_POOL_SIZE": str(args.pool_size),
               "REWARD_SERVER_CACHE_SIZE": str(args.cache_size)}
        with run_server(Path(tempfile.mkdtemp(prefix="bench-load-")), env=env) as srv:
            wait_for_sandbox(srv.url)
            # warm-up: the math workers' first SymPy imports, a few containers' first runs
            asyncio.run(run_load(srv.url, args.clients, 5.0, args.code_share, seed=99))
            reports = runs(srv.url, srv.proc.pid)
            pid = srv.proc.pid
        time.sleep(1.0)
        leaked = len([c for c in sandbox_containers()
                      if c["owner"].split(":")[1:2] == [str(pid)]])
    report = reports[0]
    print(f"{args.clients} clients x {report.duration_s:.0f} s, batches of {GROUP} "
          f"({args.code_share:.0%} code), cache {args.cache_size or 'off'}, "
          f"{os.cpu_count()} cores")
    s = print_report("all honest", report)
    result: dict = {**s, "rss_mb": report.rss_mb}
    failed = bool(s["errors"])
    if args.hostile:
        mixed = reports[1]
        assert mixed.hostile is not None
        m = print_report(f"{args.hostile} hostile + {args.clients - args.hostile} honest: "
                         "the honest clients", mixed)
        h = mixed.hostile.summary()
        print(f"  the hostile client(s): {h['requests']} requests, p50 {h['p50_ms']:.0f} ms, "
              f"p99 {h['p99_ms']:.0f} ms, errors {h['errors']}")
        ratio = {q: m[f"{q}_ms"] / max(s[f"{q}_ms"], 1e-9) for q in ("p50", "p99")}
        print(f"  honest p50 {ratio['p50']:.2f}x, p99 {ratio['p99']:.2f}x the all-honest run "
              "(goal: p99 within 2x)")
        result["hostile_run"] = {"honest": m, "hostile": h, "p50_ratio": ratio["p50"],
                                 "p99_ratio": ratio["p99"]}
        failed = failed or bool(m["errors"] or h["errors"])
    if leaked is not None:
        print(f"  containers left after shutdown: {leaked}")
        result["containers_left"] = leaked
    name = f"bench_load{'' if args.cache_size else '_nocache'}{'_hostile' if args.hostile else ''}"
    settings = {k: v for k, v in vars(args).items() if k not in ("publish", "soak_minutes")}
    path = record(name, result, settings, publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")
    if failed or leaked:
        raise SystemExit(1)


def soak(args: argparse.Namespace) -> None:
    """A long run on a fresh server: what grows (RSS, worker processes, containers) minute
    by minute, and whether any reward was wrong or missing."""
    import tempfile

    from bench.record import commit, record
    from reward_server.testing import run_server, sandbox_containers, wait_for_sandbox

    measured_on = commit()
    env = {"REWARD_SERVER_MATH_WORKERS": "0", "REWARD_SERVER_SANDBOX_POOL_SIZE":
           str(args.pool_size), "REWARD_SERVER_CACHE_SIZE": str(args.cache_size)}
    duration_s = args.soak_minutes * 60
    with run_server(Path(tempfile.mkdtemp(prefix="bench-soak-")), env=env) as srv:
        wait_for_sandbox(srv.url)
        pid = srv.proc.pid
        report = asyncio.run(run_load(srv.url, args.clients, duration_s, args.code_share,
                                      pid, sample_s=60.0))
    time.sleep(1.0)
    leaked = len(sandbox_containers(pid))
    s = print_report(f"soak: {args.clients} clients x {args.soak_minutes:g} min", report)
    print(f"  {'min':>5s} {'RSS MB':>8s} {'procs':>6s} {'containers':>10s} {'requests':>9s} "
          f"{'errors':>6s}")
    for row in report.samples:
        print(f"  {row['t_s'] / 60:5.1f} {row['rss_mb']:8.0f} {row['processes']:6d} "
              f"{row['containers']:10d} {row['requests']:9d} {row['errors']:6d}")
    print(f"  containers left after shutdown: {leaked}")
    figures = {**s, "per_minute": report.samples, "containers_left": leaked,
               "error_examples": report.error_examples[:10]}
    path = record("bench_load_soak", figures, {
        "clients": args.clients, "minutes": args.soak_minutes, "code_share": args.code_share,
        "pool_size": args.pool_size, "cache_size": args.cache_size}, publish=args.publish,
        measured_on=measured_on)
    print(f"wrote {path}")
    if s["errors"] or leaked:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
