"""The fairness scenario: one slow batch next to an honest one, on a fresh server.

Client A posts a batch of distinct slow items (towers of exponents that run into the math
time limit; with ``--code``, programs that sleep through their test); one second later client
B posts 16 honest items. Prints how long each waited and what A's items came back as, and
writes JSON (date, commit, machine, figures) through ``bench/record.py``. Run it with another
checkout first on ``PYTHONPATH`` to measure an older server the same way.

    python -m bench.bench_fairness [--hostile 40] [--math-timeout 3] [--code] [--publish]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.record import commit, record
from reward_server.testing import run_server, wait_for_sandbox

ROOT = Path(__file__).resolve().parent.parent


def towers(n: int, run: int) -> list[dict[str, str]]:
    """Distinct towers (a new reference per run, so no timeout is remembered across runs)."""
    return [{"response": f"\\boxed{{{3 + k % 5}^{{{5 + k % 4}^{{{7 + k // 20}^{{9}}}}}}}}",
             "answer": str(run + 3)} for k in range(n)]


def sleepers(n: int, run: int) -> list[dict[str, Any]]:
    return [{"response": f"```python\nimport time  # {run} {k}\ntime.sleep(60)\n```",
             "tests": [{"input": "", "output": "done"}], "time_limit_s": 2} for k in range(n)]


HONEST = {
    "math numbers": ("math", [{"response": "\\boxed{3}", "answer": "8"}] * 16),
    "math SymPy": ("math", [{"response": f"\\boxed{{\\frac{{\\sqrt{{{k + 2}}}}}{{2}}}}",
                             "answer": f"\\sqrt{{{k + 2}}}/2"} for k in range(16)]),
    "code": ("code", [{"response": "```python\nprint(int(input()) * 2)\n```",
                       "tests": [{"input": str(k), "output": str(2 * k)}]} for k in range(16)]),
}


async def scenario(url: str, verifier: str, hostile: list[dict], honest: list[dict]
                   ) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=1800) as http:
        async def post(items: list[dict], delay_s: float) -> tuple[float, list[dict]]:
            await asyncio.sleep(delay_s)
            started = time.monotonic()
            r = await http.post(f"/v1/verify/{verifier}", json={"items": items})
            r.raise_for_status()
            return time.monotonic() - started, r.json()["results"]

        (a_s, a), (b_s, b) = await asyncio.gather(post(hostile, 0.0), post(honest, 1.0))
    return {"a_s": a_s, "b_s": b_s, "b_scores": dict(Counter(str(r["score"]) for r in b)),
            "a_results": dict(Counter(f"{r['status']}: {(r.get('detail') or '')[:40]}" for r in a))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hostile", type=int, default=40, help="items in A's batch")
    ap.add_argument("--math-timeout", type=float, default=3.0)
    ap.add_argument("--code", action="store_true", help="also the code scenario (Docker)")
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/bench_fairness.json")
    args = ap.parse_args()
    measured_on = commit()
    env = {"REWARD_SERVER_CACHE_SIZE": "0", "REWARD_SERVER_MATH_WORKERS": "2",
           "REWARD_SERVER_MATH_TIMEOUT_S": str(args.math_timeout),
           "REWARD_SERVER_SANDBOX_POOL_SIZE": "2"}
    out: dict[str, Any] = {}
    with run_server(Path(tempfile.mkdtemp(prefix="bench-fairness-")), env=env) as srv:
        warm = [{"response": "\\boxed{\\sqrt{8}}", "answer": "2\\sqrt{2}"}] * 2
        httpx.post(f"{srv.url}/v1/verify/math", json={"items": warm}, timeout=300)
        runs = ["math numbers", "math SymPy"] + (["code"] if args.code else [])
        for run, name in enumerate(runs):
            verifier, honest = HONEST[name]
            if verifier == "code":
                wait_for_sandbox(srv.url)
            hostile = (sleepers if verifier == "code" else towers)(args.hostile, run)
            out[name] = asyncio.run(scenario(srv.url, verifier, hostile, honest))
            r = out[name]
            print(f"{name:13s} B (honest, 16 items) {r['b_s']:7.2f} s  scores "
                  f"{r['b_scores']}")
            print(f"{'':13s} A ({args.hostile} slow items)  {r['a_s']:7.2f} s  "
                  f"{r['a_results']}")
    print(f"({os.cpu_count()} cores, {args.math_timeout:g} s math limit, 2 math workers, "
          "2 containers, cache off)")
    settings = {"hostile": args.hostile, "math_timeout_s": args.math_timeout,
                "code": args.code, "math_workers": 2, "pool_size": 2, "cache": "off"}
    path = record("bench_fairness", out, settings, publish=args.publish,
                  measured_on=measured_on)
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
