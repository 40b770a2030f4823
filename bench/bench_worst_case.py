"""Worst-case text at the field limit: how long the server process spends on each shape,
and what another client sees meanwhile.

Two parts, each over ``reward_server.worst_case``'s table (every field at
REWARD_SERVER_MAX_FIELD_BYTES, a question at its 100,000-character limit):

1. triage in this process: the seconds one item costs, and per MB of its hostile field
   (and the code verifier's fence extraction, which runs on the event loop);
2. the real server on loopback: one hostile item per request while a second client polls
   ``/healthz`` and posts ``\\boxed{6}``; the worst latency that client saw, and the
   hostile request's own time and verdict.

Prints a table and writes JSON (date, git commit, machine, figures) to
bench/results/worst_case-<date>.json through ``bench/record.py``. A shape still running
after ``--cap-s`` seconds of triage is stopped and reported as over the cap (a stall that
long is the finding).

    python -m bench.bench_worst_case [--size BYTES] [--only NAME ...] [--no-server] [--publish]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.record import commit, record
from reward_server.settings import Settings
from reward_server.testing import run_server
from reward_server.verifiers.code.extract import extract_code
from reward_server.verifiers.math import MathItem, MathVerifier
from reward_server.worst_case import FIELD_BYTES, math_cases, reference_cases

ROOT = Path(__file__).resolve().parent.parent


class _Cap(Exception):
    pass


def _hostile_field(item: dict[str, Any]) -> str:
    return max((v for v in item.values() if isinstance(v, str)), key=len)


def time_triage(cases: dict[str, dict[str, Any]], cap_s: float) -> dict[str, dict[str, Any]]:
    """Seconds of ``MathVerifier.triage`` (with the item's validation) per case."""
    verifier = MathVerifier(Settings())

    def stop(*_: Any) -> None:
        raise _Cap

    signal.signal(signal.SIGALRM, stop)
    out = {}
    for name, fields in cases.items():
        mb = len(_hostile_field(fields).encode()) / 1e6
        signal.setitimer(signal.ITIMER_REAL, cap_s)
        started = time.perf_counter()
        try:
            result = verifier.triage(MathItem(**fields))
            seconds: float | None = time.perf_counter() - started
            verdict = getattr(result, "status", "pool job")
        except _Cap:
            seconds, verdict = None, f"over {cap_s:g} s"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        out[name] = {"mb": round(mb, 3), "triage_s": seconds, "triage": verdict,
                     "s_per_mb": None if seconds is None else seconds / mb}
        print(f"  triage {name:32s} {_s(seconds):>9s}", flush=True)
    return out


CODE_SHAPES = {"code: newlines": "\n", "code: fence lines": "```\n",
               "code: tagged fences": "```python\n", "code: spaced fences": " ``` \n",
               "code: closed blocks": "```\nx\n```\n"}


def time_code(size: int) -> dict[str, dict[str, Any]]:
    """Seconds of the code verifier's ``extract_code`` (on the event loop) per shape."""
    out = {}
    for name, pattern in CODE_SHAPES.items():
        text = pattern * (size // len(pattern))
        started = time.perf_counter()
        extract_code(text)
        seconds = time.perf_counter() - started
        mb = len(text.encode()) / 1e6
        out[name] = {"mb": round(mb, 3), "triage_s": seconds, "triage": "extracted",
                     "s_per_mb": seconds / mb}
        print(f"  extract {name:31s} {_s(seconds):>9s}", flush=True)
    return out


def through_server(url: str, fields: dict[str, Any]) -> dict[str, Any]:
    """One hostile item in its own request; another client's latencies meanwhile."""
    out: dict[str, Any] = {}

    def post() -> None:
        started = time.monotonic()
        with httpx.Client(base_url=url, timeout=600) as c:
            r = c.post("/v1/verify/math", json={"items": [fields]})
        out["hostile_s"] = time.monotonic() - started
        result = r.json()["results"][0] if r.status_code == 200 else {"status": r.status_code}
        out["score"], out["status"] = result.get("score"), result.get("status")

    health: list[float] = []
    other: list[float] = []
    hostile = threading.Thread(target=post)
    hostile.start()
    with httpx.Client(base_url=url, timeout=600) as c:
        while not health or hostile.is_alive():  # at least once, however fast it is
            started = time.monotonic()
            c.get("/healthz")
            health.append(time.monotonic() - started)
            started = time.monotonic()
            c.post("/v1/verify/math",
                   json={"items": [{"response": "so \\boxed{6}", "answer": "6"}]})
            other.append(time.monotonic() - started)
            time.sleep(0.02)
    hostile.join()
    out.update(healthz_max_s=max(health), healthz_median_s=statistics.median(health),
               other_max_s=max(other), other_median_s=statistics.median(other))
    return out


def _s(seconds: float | None) -> str:
    return "over cap" if seconds is None else f"{seconds:.3f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=FIELD_BYTES,
                    help="bytes in each hostile field (default: the field limit)")
    ap.add_argument("--only", nargs="*", help="case names to run (default: all)")
    ap.add_argument("--cap-s", type=float, default=30.0, help="triage seconds per case")
    ap.add_argument("--no-server", action="store_true", help="triage only")
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/worst_case.json")
    args = ap.parse_args()
    measured_on = commit()
    cases = {**math_cases(args.size), **reference_cases(args.size)}
    if args.only:
        cases = {k: v for k, v in cases.items() if k in args.only}
    print(f"{len(cases)} cases, hostile fields of up to {args.size} bytes")
    figures = time_triage(cases, args.cap_s)
    if not args.only:
        figures.update(time_code(args.size))
    if not args.no_server:
        env = {"REWARD_SERVER_CACHE_SIZE": "0", "REWARD_SERVER_MATH_WORKERS": "2"}
        with run_server(Path(tempfile.mkdtemp(prefix="bench-worst-case-")), env=env) as srv:
            httpx.post(f"{srv.url}/v1/verify/math", timeout=300,
                       json={"items": [{"response": "\\boxed{\\sqrt{8}}", "answer": "2"}]})
            for name, fields in cases.items():
                if figures[name]["triage_s"] is None:
                    continue  # over the cap in triage: the server would stall as long
                figures[name].update(through_server(srv.url, fields))
                print(f"  server {name:32s} other client max "
                      f"{figures[name]['other_max_s']:.3f} s", flush=True)

    print(f"\n{'case':34s} {'MB':>5s} {'triage':>9s} {'s/MB':>7s} {'healthz max':>12s} "
          f"{'other max':>10s} {'request':>8s}  verdict")
    for name, f in figures.items():
        per_mb = "-" if f["s_per_mb"] is None else f"{f['s_per_mb']:.3f}"
        server = (f"{f['healthz_max_s']:12.3f} {f['other_max_s']:10.3f} {f['hostile_s']:8.2f}"
                  f"  {f['status']} {f['score']}" if "other_max_s" in f else
                  f"{'-':>12s} {'-':>10s} {'-':>8s}  triage: {f['triage']}")
        print(f"{name:34s} {f['mb']:5.2f} {_s(f['triage_s']):>9s} {per_mb:>7s} {server}")
    path = record("worst_case", figures, {"size_bytes": args.size, "cap_s": args.cap_s,
                                          "server": not args.no_server, "math_workers": 2,
                                          "cpus": os.cpu_count()},
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
