"""Throughput and latency of POST /v1/verify/math against math-verify in-process.

Two item sets, each labelled with the truth, so a disagreement between us and math-verify
is settled by the label:
- Math-Verify 0.9.0's own test suite (its rows at default options: real NuminaMath and
  OpenThoughts outputs, Minerva answers, number formats), downloaded at run time;
- a realistic RL batch: 32 problems x groups of 16 completions (512 items) in GSM8K and MATH
  styles, where a group repeats answers (the same right answer in several forms, the same
  wrong answers, verbatim duplicate completions).

On each: math-verify in-process (one core) and the server with the cache off (all cores),
in alternating rounds (a shared machine's load changes; each ratio compares passes run
side by side, and the spread is printed), then for the batch the server with the cache on
(cold, then warm). Each tool first gets warm-up passes. Items/s are also given per core
used, and CPU milliseconds per item (the server's process and its workers; the client is
not counted), which the load does not change much. Prints tables and writes JSON (date,
commit, machine, figures) through ``bench/record.py``; ``--publish`` makes it the figures
docs/benchmarks.md shows.

    python -m bench.bench_math [--groups 32] [--group-size 16] [--concurrency 4] [--rounds 3]
                               [--publish]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.record import commit, record
from reward_server.testing import run_server  # the same launcher the tests use

ROOT = Path(__file__).resolve().parent.parent


# (reference, equivalent forms, wrong forms)
PROBLEMS: list[tuple[str, list[str], list[str]]] = [
    ("72", ["72", "72.0", "\\$72"], ["48", "24", "70", "48 \\text{ or } 72"]),
    ("18", ["18", "18 \\text{ dollars}"], ["16", "9", "20", "16, 17, 18, 19"]),
    ("1250", ["1250", "1,250"], ["1200", "125"]),
    ("0.5", ["\\frac{1}{2}", "0.5", "\\dfrac12"], ["\\frac{1}{3}", "0.25", "2"]),
    ("\\frac{3}{4}", ["\\frac34", "0.75", "3/4"], ["\\frac{4}{3}", "0.7", "\\frac{1}{4}"]),
    ("2\\sqrt{2}", ["2\\sqrt2", "\\sqrt{8}"], ["\\sqrt{2}", "4", "2\\sqrt{3}"]),
    ("\\frac{\\sqrt{3}}{2}", ["\\frac{\\sqrt3}{2}", "\\frac{3}{2\\sqrt{3}}"], ["\\frac{1}{2}", "\\sqrt{3}"]),
    ("x^2+2x+1", ["(x+1)^2", "x^2+2x+1", "1+2x+x^2"], ["x^2+1", "(x-1)^2"]),
    ("(x-2)(x+3)", ["x^2+x-6", "(x+3)(x-2)"], ["x^2-x-6", "(x+2)(x-3)"]),
    ("\\pi", ["\\pi"], ["2\\pi", "3.14", "\\frac{\\pi}{2}"]),
    ("\\frac{\\pi}{3}", ["\\frac{\\pi}{3}", "\\frac{1}{3}\\pi"], ["\\frac{\\pi}{6}", "60"]),
    ("(1,2)", ["(1, 2)", "\\left(1,2\\right)"], ["(2,1)", "[1,2]", "(1,3)"]),
    ("[0, 1)", ["[0,1)"], ["(0,1)", "[0,1]"]),
    ("(-\\infty, 3]", ["(-\\infty,3]"], ["(-\\infty,3)", "[3,\\infty)"]),
    ("\\{1, 2, 3\\}", ["\\{3,2,1\\}", "\\{1,2,3\\}"], ["\\{1,2\\}", "\\{1,2,4\\}"]),
    ("x = 5", ["5", "x=5"], ["x=-5", "6"]),
    ("50\\%", ["50\\%", "50"], ["40\\%", "5"]),
    ("12", ["12", "12 \\text{ cm}"], ["13", "24"]),
    ("-7", ["-7"], ["7", "-6", "\\pm 7"]),
    ("1000000", ["10^6", "1,000,000"], ["10^5", "100000"]),
    ("\\frac{5}{2}", ["2\\frac{1}{2}", "2.5", "\\frac{10}{4}"], ["\\frac{2}{5}", "3"]),
    ("\\sqrt{13}", ["\\sqrt{13}"], ["13", "\\sqrt{12}"]),
    ("3\\sqrt{3}", ["\\sqrt{27}", "3\\sqrt3"], ["9", "\\sqrt{3}"]),
    ("\\text{(C)}", ["\\text{(C)}", "C"], ["\\text{(B)}", "D"]),
    # a computation for a rational reference is no stated number (README, the guards): 0
    ("2", ["2", "2.0"], ["3", "1", "\\frac{4}{2}"]),
    ("4", ["4"], ["2", "16", "\\sqrt{16}"]),
    ("\\infty", ["\\infty"], ["-\\infty", "0"]),
    ("y = 2x + 1", ["y=2x+1", "y = 1 + 2x"], ["y=2x-1", "y=x+1"]),
    ("0", ["0", "0.0"], ["1", "-1", "0 \\text{ and } 1"]),
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", ["\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}"], ["\\begin{pmatrix}1&3\\\\2&4\\end{pmatrix}"]),
    ("\\frac{1}{6}", ["\\frac16", "1/6"], ["\\frac{1}{5}", "0.16"]),
    ("e^2", ["e^2", "e^{2}"], ["2e", "e"]),
]


def completion(answer: str, style: int, rng: random.Random) -> str:
    steps = " ".join(f"Step {k}: we compute the intermediate quantity {rng.randint(2, 99)}."
                     for k in range(rng.randint(3, 9)))
    if style == 0:
        return f"Let's think step by step. {steps}\nTherefore the final answer is $\\boxed{{{answer}}}$."
    if style == 1:
        return f"{steps}\nSo the answer is $\\boxed{{{answer}}}$. I hope it is correct."
    return f"{steps}\nThe final answer is ${answer}$."


def make_items(groups: int, group_size: int, seed: int = 0) -> tuple[list[dict], list[bool]]:
    rng = random.Random(seed)
    items, truth = [], []
    for g in range(groups):
        gold, right, wrong = PROBLEMS[g % len(PROBLEMS)]
        group: list[tuple[dict, bool]] = []
        while len(group) < group_size:
            if group and rng.random() < 0.25:  # verbatim duplicate, common at low temperature
                group.append(rng.choice(group))
                continue
            correct = rng.random() < 0.5
            answer = rng.choice(right if correct else wrong)
            group.append(({"response": completion(answer, rng.randrange(3), rng),
                           "answer": gold}, correct))
        for item, label in group:
            items.append(item)
            truth.append(label)
    return items, truth


def mv_gold_text(answer: str) -> str:
    """How a math-verify user passes a reference: bare LaTeX wrapped in $…$, text as is."""
    marked = any(m in answer for m in ("$", "\\boxed", "\\(", "\\["))
    return answer if marked else f"${answer}$"


def run_math_verify(items: list[dict], timeout_s: int) -> tuple[list[bool | None], float]:
    """math-verify in-process, one core, as its suite calls it: a box first, then LaTeX,
    then plain expressions, for both sides; its own (signal) timeouts on."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    verdicts: list[bool | None] = []
    started = time.perf_counter()
    for item in items:
        t0 = time.perf_counter()
        gold = parse(mv_gold_text(item["answer"]), config, parsing_timeout=timeout_s)
        pred = parse(item["response"], config, parsing_timeout=timeout_s)
        ok = verify(gold, pred, timeout_seconds=timeout_s)
        verdicts.append(None if time.perf_counter() - t0 >= timeout_s else bool(ok))
    return verdicts, time.perf_counter() - started


async def run_server_pass(url: str, items: list[dict], group_size: int,
                          concurrency: int) -> tuple[list[dict], float, list[float]]:
    """One request per group (as a trainer scores a group), ``concurrency`` in flight."""
    slots = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:

        async def one(start: int) -> list[dict]:
            async with slots:
                t0 = time.perf_counter()
                r = await client.post("/v1/verify/math",
                                      json={"items": items[start : start + group_size]})
                latencies.append(time.perf_counter() - t0)
                r.raise_for_status()
                return r.json()["results"]

        t0 = time.perf_counter()
        parts = await asyncio.gather(*(one(s) for s in range(0, len(items), group_size)))
        elapsed = time.perf_counter() - t0
    return [r for part in parts for r in part], elapsed, latencies


def table_report() -> dict[str, int]:
    """The test suite's adversarial table, labelled by hand: where the two tools differ."""
    from reward_server.verifiers.math.check import check
    from reward_server.verifiers.math.extract import extract_answer, extract_gold
    from reward_server.verifiers.math.labelled_cases import EQUIVALENCE, EXTRACTION
    from reward_server.verifiers.math.numbers import fast_check

    cases = EQUIVALENCE + EXTRACTION
    items = [{"response": r, "answer": a} for r, a, _ in cases]
    mv, _ = run_math_verify(items, 5)
    ours = []
    for item in items:
        pred, gold = extract_answer(item["response"]), extract_gold(item["answer"])
        verdict = pred and (fast_check(pred, gold, 1e-6) or check(pred, gold, 1e-6))
        ours.append(bool(verdict and verdict.correct))
    truth = [c for *_, c in cases]
    figures = {"cases": len(cases),
               "right_ours": sum(o == t for o, t in zip(ours, truth, strict=True)),
               "right_math_verify": sum(m == t for m, t in zip(mv, truth, strict=True))}
    print(f"\nadversarial table ({len(cases)} hand-labelled cases from the tests): "
          f"ours right on {figures['right_ours']}, "
          f"math-verify right on {figures['right_math_verify']}")
    for item, o, m, t in zip(items, ours, mv, truth, strict=True):
        if o != m:
            right = "ours" if o == t else "math-verify"
            print(f"  {item['response'][-34:]!r:40} vs {item['answer']!r:24} ours={o!s:5} "
                  f"math-verify={m!s:5} truth={t!s:5} -> {right} right")
    return figures


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def suite_items() -> tuple[list[dict], list[bool]]:
    """Math-Verify 0.9.0's own test rows at default options (downloaded, never copied)."""
    from reward_server.verifiers.math.upstream_suite import load_suite

    cases = [c for c in load_suite() if c.at_defaults]
    return [{"response": c.pred, "answer": c.gold} for c in cases], [c.expected for c in cases]


def _cpu_s(*processes: psutil.Process) -> float:
    """User + system CPU seconds of ``processes`` and all their children, now."""
    total = 0.0
    for proc in processes:
        for p in (proc, *proc.children(recursive=True)):
            try:
                times = p.cpu_times()
            except psutil.Error:  # a worker replaced meanwhile
                continue
            total += times.user + times.system
    return total


def measure(name: str, items: list[dict], truth: list[bool], warm_items: list[dict],
            args: argparse.Namespace, cache_passes: bool) -> dict[str, Any]:
    """math-verify in-process and the server with the cache off, measured in alternation
    (``--rounds`` pairs, so a change in the machine's load falls on both sides of a ratio),
    then the server with the cache on (cold, then warm) against their median."""
    cores = os.cpu_count() or 1
    run_math_verify(warm_items, args.timeout)
    tmp = ROOT / "bench" / "results" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    me = psutil.Process()
    rounds: list[dict[str, float]] = []
    ours_cold: list[dict] = []
    mv: list[bool | None] = []
    latencies: list[float] = []
    rows: dict[str, dict[str, Any]] = {}
    settings = [("0", ["cache off"])]
    if cache_passes:
        settings.append(("100000", ["cache on, cold", "cache on, warm"]))
    for cache, passes in settings:
        env = {"REWARD_SERVER_CACHE_SIZE": cache,
               "REWARD_SERVER_MATH_TIMEOUT_S": str(args.timeout),
               "REWARD_SERVER_MATH_WORKERS": str(cores),
               # each round computes its items: no timeout remembered from an earlier one
               "REWARD_SERVER_TIMEOUT_MEMORY_S": "0"}
        with run_server(tmp, env=env) as srv:
            server = psutil.Process(srv.proc.pid)
            # Each worker process builds its own ANTLR tables and sees about 1/cores of a
            # pass; math-verify in-process sees every item in its one warm-up pass. So the
            # server gets enough passes that each worker has met most shapes too. Each pass
            # with its own tolerance, so that with the cache on every pass is computed too.
            for k in range(args.server_warm_passes):
                warm_pass = [{**item, "tolerance": 10.0 ** -(7 + k)} for item in warm_items]
                asyncio.run(run_server_pass(srv.url, warm_pass, args.group_size,
                                            args.concurrency))
            if cache == "0":
                for _ in range(args.rounds):
                    load = os.getloadavg()[0]
                    cpu0 = me.cpu_times()
                    mv, mv_s = run_math_verify(items, args.timeout)
                    cpu1 = me.cpu_times()
                    server_cpu = _cpu_s(server)
                    ours_cold, srv_s, lat = asyncio.run(run_server_pass(
                        srv.url, items, args.group_size, args.concurrency))
                    latencies += lat
                    rounds.append({
                        "load": load, "mv_items_s": len(items) / mv_s,
                        "server_items_s": len(items) / srv_s, "ratio": mv_s / srv_s,
                        "mv_cpu_ms": 1000 * (cpu1.user + cpu1.system - cpu0.user - cpu0.system)
                        / len(items),
                        "server_cpu_ms": 1000 * (_cpu_s(server) - server_cpu) / len(items),
                        "timeouts": sum(r["status"] == "timeout" for r in ours_cold)})
                continue
            for label in passes:
                _, elapsed, lat = asyncio.run(
                    run_server_pass(srv.url, items, args.group_size, args.concurrency))
                rows[f"server, {label} ({cores} cores)"] = {
                    "items_s": len(items) / elapsed, "cores": cores,
                    "p50": pct(lat, 0.5), "p99": pct(lat, 0.99)}

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    base = median("mv_items_s")
    rows = {"math-verify (in-process, 1 core)": {
                "items_s": base, "cores": 1, "p50": None, "p99": None,
                "cpu_ms_per_item": median("mv_cpu_ms")},
            f"server, cache off ({cores} cores)": {
                "items_s": median("server_items_s"), "cores": cores,
                "p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99),
                "cpu_ms_per_item": median("server_cpu_ms"),
                # the median of the rounds' ratios: each compares passes run side by side
                "x_math_verify": median("ratio")},
            **rows}
    print(f"\n{name}: {len(items)} items; math-verify and the server (cache off) measured "
          f"in {len(rounds)} alternating rounds (medians; x mv of the cache off row: the "
          "median of the rounds' ratios; of the cache on rows: against the median "
          "math-verify pass)")
    print(f"{'':34} {'items/s':>9} {'x mv':>6} {'per core':>9} {'x mv/core':>10} "
          f"{'p50 ms/req':>11} {'p99 ms/req':>11} {'cpu ms/item':>12}")
    for label, row in rows.items():
        row.setdefault("x_math_verify", row["items_s"] / base)
        row["x_math_verify_per_core"] = row["x_math_verify"] / row["cores"]
        p50 = f"{row['p50'] * 1000:11.1f}" if row["p50"] is not None else f"{'-':>11}"
        p99 = f"{row['p99'] * 1000:11.1f}" if row["p99"] is not None else f"{'-':>11}"
        cpu = row.get("cpu_ms_per_item")
        cpu_text = f"{cpu:12.2f}" if cpu is not None else f"{'-':>12}"
        print(f"{label:34} {row['items_s']:9.1f} {row['x_math_verify']:6.2f} "
              f"{row['items_s'] / row['cores']:9.1f} {row['x_math_verify_per_core']:10.2f} "
              f"{p50} {p99} {cpu_text}")
    ratios = [r["ratio"] for r in rounds]
    print("cache off / math-verify, by round: " + ", ".join(
        f"{r['ratio']:.2f} (load {r['load']:.1f}, {r['timeouts']} timeouts)" for r in rounds)
        + f"; median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, "
        f"max {max(ratios):.2f}")
    print("CPU per item (server: its process and workers, the client not counted): "
          f"math-verify {median('mv_cpu_ms'):.2f} ms, server {median('server_cpu_ms'):.2f} ms")

    ours = [r["correct"] for r in ours_cold]
    compared = [(i, o, m) for i, (o, m) in enumerate(zip(ours, mv, strict=True)) if m is not None]
    agree = sum(o == m for _, o, m in compared)
    right_ours = sum(o == t for o, t in zip(ours, truth, strict=True))
    right_mv = sum(m == t for m, t in zip(mv, truth, strict=True))
    print(f"agreement with math-verify: {agree}/{len(compared)} (excluding "
          f"{len(items) - len(compared)} math-verify timeouts); right against the labels: "
          f"ours {right_ours}/{len(items)}, math-verify {right_mv}/{len(items)}")
    seen = set()
    for i, o, m in compared:
        key = (items[i]["answer"], ours_cold[i]["extracted"])
        if o != m and key not in seen:
            seen.add(key)
            right = "ours" if o == truth[i] else "math-verify"
            print(f"  disagree: answer {items[i]['answer'][-40:]!r} response ends "
                  f"{items[i]['response'][-40:]!r}: ours={o} math-verify={m} "
                  f"truth={truth[i]} -> {right} right")
    return {"rows": rows, "rounds": rounds, "agreement": agree / len(compared),
            "items": len(items), "right_ours": right_ours, "right_math_verify": right_mv}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--timeout", type=int, default=5, help="per-item timeout, both tools")
    ap.add_argument("--server-warm-passes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating math-verify / server (cache off) passes")
    ap.add_argument("--skip-table", action="store_true")
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/bench_math.json")
    args = ap.parse_args()
    measured_on = commit()
    print(f"{os.cpu_count()} cores")

    report: dict[str, Any] = {}
    # Math-Verify's own suite: real model outputs. Warm-up: the same items with another
    # tolerance (the cache is off in the measured pass anyway).
    items, truth = suite_items()
    warm = [{**item, "tolerance": 1e-7} for item in items]
    report["suite"] = measure("math-verify 0.9.0 test suite", items, truth, warm, args, False)

    # The synthetic RL batch. Both tools are measured warm (a trainer runs for hours): one
    # pass over a different draw of the same problems first, so ANTLR's lazily built tables
    # exist in both; its tolerance differs, so no warm-up verdict is reused from the cache.
    items, truth = make_items(args.groups, args.group_size)
    warm, _ = make_items(args.groups, args.group_size, seed=1)
    warm = [{**item, "tolerance": 1e-7} for item in warm]
    report["synthetic"] = measure(
        f"synthetic batch ({args.groups} groups x {args.group_size}, "
        f"{len({json.dumps(i) for i in items})} distinct)", items, truth, warm, args, True)
    if not args.skip_table:
        report["adversarial_table"] = table_report()
    settings = {k: v for k, v in vars(args).items() if k != "publish"}
    path = record("bench_math", report, {**settings, "math_workers": os.cpu_count()},
                  publish=args.publish, measured_on=measured_on)
    print(f"\nwrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
