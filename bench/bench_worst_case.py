"""Worst-case text at the field limit: how long the server process spends on each shape,
and what another client sees meanwhile.

Two parts, each over ``reward_server.worst_case``'s table (every field at
REWARD_SERVER_MAX_FIELD_BYTES, a question at its 100,000-character limit):

1. triage in this process: the seconds one item costs, and per MB of its hostile field
   (and the code verifier's fence extraction, which runs on the event loop);
2. the real server on loopback: one hostile request (one caller's address) while a second
   caller (another address) polls ``/healthz`` and posts an honest item to the same
   verifier; the median and worst latency that caller saw, and the hostile request's own
   time and verdicts. Math's table, then each other verifier's worst input: format's
   crafted character classes, backtracking regex and fence runs, ifeval's 2,000
   instructions (32 an item), a reasoning_gym answer of a field of parentheses, and a code
   item that never ends (when the Docker engine is there). Target: no other caller waits
   more than 2 s behind any one of them.

Prints a table and writes JSON (date, git commit, machine, figures) to
bench/results/worst_case-<date>.json through ``bench/record.py``. A shape still running
after ``--cap-s`` seconds of triage is stopped and reported as over the cap (a stall that
long is the finding).

    python -m bench.bench_worst_case [--size BYTES] [--only NAME ...] [--no-server] [--publish]
"""

from __future__ import annotations

import argparse
import json
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
from reward_server.testing import PROXY_SETTINGS, A, B, as_caller, run_server, wait_for_sandbox
from reward_server.verifiers.code.extract import extract_code
from reward_server.verifiers.math import MathItem, MathVerifier
from reward_server.worst_case import (
    FIELD_BYTES,
    format_cases,
    ifeval_cases,
    math_cases,
    reference_cases,
)

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


HOSTILE_ADDRESS, OTHER_ADDRESS = A, B  # two callers, as a trusted proxy names them
HONEST = {  # each verifier's honest item, as the other caller sends it
    "math": {"response": "so \\boxed{6}", "answer": "6"},
    "format": {"response": "<think>\nx\n</think>\n<answer>\n7\n</answer>",
               "rules": ["think_answer"]},
    "ifeval": {"response": "a short answer", "instructions": [
        {"instruction_id": "punctuation:no_comma"}]},
    "reasoning_gym": {"response": "<answer>3</answer>", "question": "1 + 2 =", "answer": "3",
                      "metadata": {"source_dataset": "basic_arithmetic"}},
    "code": {"response": "print(input())", "tests": [{"input": "1", "output": "1"}]},
}


def _client(url: str, address: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=600, headers=as_caller(address))


def through_server(url: str, verifier: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """One hostile request of ``items``; another caller's latencies meanwhile."""
    out: dict[str, Any] = {}
    body = json.dumps({"items": items}).encode()  # here: encoding on the thread would
    # hold this process's interpreter, and the probes' latencies would be the client's own

    def post() -> None:
        started = time.monotonic()
        with _client(url, HOSTILE_ADDRESS) as c:
            r = c.post(f"/v1/verify/{verifier}", content=body,
                       headers={"content-type": "application/json"})
        out["hostile_s"] = time.monotonic() - started
        if r.status_code != 200:
            out["status"], out["score"] = r.status_code, None
            return
        results = r.json()["results"]
        statuses = sorted({str(x.get("status")) for x in results})
        scores = [x.get("score") for x in results]
        out["status"] = "/".join(statuses)
        out["score"] = scores[0] if len(set(map(str, scores))) == 1 else "mixed"

    health: list[float] = []
    other: list[float] = []
    hostile = threading.Thread(target=post)
    hostile.start()
    with _client(url, OTHER_ADDRESS) as c:
        while not health or hostile.is_alive():  # at least once, however fast it is
            started = time.monotonic()
            c.get("/healthz")
            health.append(time.monotonic() - started)
            started = time.monotonic()
            c.post(f"/v1/verify/{verifier}", json={"items": [HONEST[verifier]]})
            other.append(time.monotonic() - started)
            time.sleep(0.02)
    hostile.join()
    out.update(healthz_max_s=max(health), healthz_median_s=statistics.median(health),
               other_max_s=max(other), other_median_s=statistics.median(other),
               probes=len(health))
    return out


def other_cases(size: int, code: bool) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Name -> (verifier, hostile batch): every verifier's worst input but math's."""
    cases: dict[str, tuple[str, list[dict[str, Any]]]] = {
        name: ("format", [item]) for name, item in format_cases(size).items()}
    cases.update({name: ("ifeval", items) for name, items in ifeval_cases(8192).items()})
    cases["reasoning_gym: a field of parentheses"] = ("reasoning_gym", [{
        **HONEST["reasoning_gym"], "response": "<answer>" + "(" * (size - 64) + "</answer>"}])
    # the costliest body to parse within max_json_values: an object of keys (values and
    # keys counted, 1 Mi), parsed in one call that holds the interpreter
    cases["request: an object of 524,000 keys"] = ("math", [{
        **HONEST["math"], "junk": {f"k{k}": 0 for k in range(524_000)}}])
    if code:
        cases["code: a loop that never ends"] = ("code", [{
            "response": "while True:\n    pass", "tests": [{"input": "", "output": "1"}]}])
    return cases


def _engine() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:  # noqa: BLE001 - no engine, no library: no code case
        return False


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
        code = not args.only and _engine()
        others = {} if args.only else other_cases(args.size, code)
        # two containers (run_server's pool): a hostile program holds one for its time
        # limit, which no scheduler can take back, and the other caller's takes the other
        env = {"REWARD_SERVER_CACHE_SIZE": "0", "REWARD_SERVER_MATH_WORKERS": "2",
               **PROXY_SETTINGS}
        with run_server(Path(tempfile.mkdtemp(prefix="bench-worst-case-")), env=env) as srv:
            httpx.post(f"{srv.url}/v1/verify/math", timeout=300,
                       json={"items": [{"response": "\\boxed{\\sqrt{8}}", "answer": "2"}]})
            for name, fields in cases.items():
                if figures[name]["triage_s"] is None:
                    continue  # over the cap in triage: the server would stall as long
                figures[name].update(through_server(srv.url, "math", [fields]))
                print(f"  server {name:32s} other client max "
                      f"{figures[name]['other_max_s']:.3f} s", flush=True)
            if code:
                wait_for_sandbox(srv.url)
            for name, (verifier, items) in others.items():
                figures[name] = {"mb": round(len(json.dumps(items).encode()) / 1e6, 3),
                                 "triage_s": None, "triage": "-", "s_per_mb": None,
                                 "verifier": verifier, "items": len(items),
                                 **through_server(srv.url, verifier, items)}
                print(f"  server {name:40s} other caller max "
                      f"{figures[name]['other_max_s']:.3f} s", flush=True)

    print(f"\n{'case':40s} {'MB':>5s} {'triage':>9s} {'s/MB':>7s} {'healthz p50/max':>16s} "
          f"{'other p50/max':>14s} {'request':>8s}  verdict")
    for name, f in figures.items():
        per_mb = "-" if f["s_per_mb"] is None else f"{f['s_per_mb']:.3f}"
        server = (f"{f['healthz_median_s']:7.3f}/{f['healthz_max_s']:.3f} "
                  f"{f['other_median_s']:6.3f}/{f['other_max_s']:.3f} {f['hostile_s']:8.2f}"
                  f"  {f['status']} {f['score']}" if "other_max_s" in f else
                  f"{'-':>12s} {'-':>10s} {'-':>8s}  triage: {f['triage']}")
        triage = "-" if "verifier" in f else _s(f["triage_s"])
        print(f"{name:40s} {f['mb']:5.2f} {triage:>9s} {per_mb:>7s} {server}")
    waits = [f["other_max_s"] for f in figures.values() if "other_max_s" in f]
    print(f"worst wait of the other caller: {max(waits, default=0):.3f} s (target: 2 s)")
    path = record("worst_case", figures, {"size_bytes": args.size, "cap_s": args.cap_s,
                                          "server": not args.no_server, "math_workers": 2,
                                          "callers": [HOSTILE_ADDRESS, OTHER_ADDRESS],
                                          "cpus": os.cpu_count()},
                  publish=args.publish, measured_on=measured_on)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
