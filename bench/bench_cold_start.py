"""Cold start under load: a fresh server gets a mixed batch of correct items at once, before
its pool holds a container, while busy loops (``nice -n 19``, stopped after ``--load-s``)
hold every CPU. Every item must score 1.0: a correct program once scored 0.0 on a cold
server in CI. A wrong score is printed with the item's whole result and the server log's
tail. The server's memory (its own RSS and its children's) is sampled every 0.5 s: a fresh
server once grew 100 -> 402 MB in 15 s.

    python -m bench.bench_cold_start [--rounds 3] [--copies 3] [--load-s 60]
        [--loops-per-cpu 1] [--nice 19] [--publish]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
CPP_ADD = ("#include <iostream>\nint main() { long a, b; std::cin >> a >> b; "
           "std::cout << a + b << std::endl; }\n")
JAVA_ADD = ("import java.util.*;\npublic class Main { public static void main(String[] x) "
            "{ Scanner s = new Scanner(System.in); System.out.println(s.nextLong() + "
            "s.nextLong()); } }\n")


def fenced(source: str, language: str = "python") -> str:
    return f"```{language}\n{source}```"


def code_items(copy: int) -> list[dict[str, Any]]:
    """Correct programs, one of each form; ``copy`` makes each source distinct (no two share
    a cache key, so every one runs)."""
    mark = f"# copy {copy}\n"
    return [
        {"verifier": "code", "response": fenced(mark + ADD),
         "tests": [{"input": "2 3", "output": "5"}, {"input": "10 -4", "output": "6"}]},
        {"verifier": "code", "response": fenced(mark + "def add(a, b):\n    return a + b\n"),
         "fn_name": "add", "tests": [{"input": "[2, 3]", "output": "[5]"}]},
        {"verifier": "code", "response": fenced(mark + "def add(a, b):\n    return a + b\n"),
         "entry_point": "add",
         "test_code": "def check(candidate):\n    assert candidate(2, 3) == 5\n"},
        {"verifier": "code", "response": fenced(mark + "def add(a, b):\n    return a + b\n"),
         "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]},
        {"verifier": "code", "language": "cpp",
         "response": fenced(f"// copy {copy}\n" + CPP_ADD, "cpp"),
         "tests": [{"input": "2 3", "output": "5"}]},
        {"verifier": "code", "language": "java",
         "response": fenced(f"// copy {copy}\n" + JAVA_ADD, "java"),
         "tests": [{"input": "2 3", "output": "5"}]},
    ]


def math_items(copy: int) -> list[dict[str, Any]]:
    return [{"verifier": "math", "response": f"\\boxed{{{copy + 4}}}", "answer": str(copy + 4)},
            {"verifier": "math", "response": "so x = \\frac{1}{2}", "answer": "0.5"}]


def tree_rss_mb(pid: int) -> float:
    """RSS of ``pid`` and all its descendants, in MB."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        children.setdefault(int(fields["PPid"]), []).append(int(name))
        rss[int(name)] = int(fields.get("VmRSS", "0 kB").split()[0])
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += rss.get(p, 0)
        stack.extend(children.get(p, []))
    return total / 1024


def busy_loops(seconds: float, per_cpu: int, niceness: int) -> list[subprocess.Popen]:
    """``per_cpu`` niced busy loops per CPU, each ended by ``timeout`` after ``seconds``."""
    loop = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(["timeout", str(seconds), "nice", "-n", str(niceness), *loop],
                             start_new_session=True)
            for _ in range(per_cpu * (os.cpu_count() or 1))]


def one_round(copies: int, load: argparse.Namespace) -> dict[str, Any]:
    from reward_server.testing import run_server

    items = [i for c in range(copies) for i in code_items(c) + math_items(c)]
    loops = busy_loops(load.load_s, load.loops_per_cpu, load.nice)
    samples: list[tuple[float, float]] = []
    try:
        with run_server(Path(tempfile.mkdtemp(prefix="bench-cold-")),
                        args=["--log-level", "info"]) as srv:
            started = time.monotonic()
            stop = threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    samples.append((time.monotonic() - started, tree_rss_mb(srv.proc.pid)))
                    stop.wait(0.5)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            with httpx.Client(base_url=srv.url, timeout=300) as c:
                r = c.post("/v1/rewards", json={"items": items})
            elapsed = time.monotonic() - started
            stop.set()
            sampler.join()
            log_tail = srv.log.read_text()[-3000:]
    finally:
        for p in loops:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    wrong = [{"item": item, "result": result} for item, result in zip(items, results, strict=True)
             if result["score"] != 1.0]
    return {"elapsed_s": round(elapsed, 1), "items": len(items), "wrong": wrong,
            "rss_mb_first": round(samples[0][1]) if samples else None,
            "rss_mb_max": round(max(s[1] for s in samples)) if samples else None,
            "rss_mb_timeline": [(round(t, 1), round(m)) for t, m in samples[::4]],
            "log_tail": log_tail if wrong else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=3, help="copies of each item form")
    parser.add_argument("--load-s", type=float, default=60.0, help="how long the loops run")
    parser.add_argument("--loops-per-cpu", type=int, default=1)
    parser.add_argument("--nice", type=int, default=19, help="the loops' niceness")
    parser.add_argument("--publish", action="store_true",
                        help="also write docs/benchmarks/bench_cold_start.json")
    args = parser.parse_args()
    from bench.record import commit, record

    measured_on = commit()
    rounds = []
    print(f"{'round':>5s} {'items':>5s} {'secs':>6s} {'wrong':>5s} {'RSS MB first':>12s} "
          f"{'max':>5s}")
    for n in range(args.rounds):
        row = one_round(args.copies, args)
        rounds.append(row)
        print(flush=True)
        print(f"{n:5d} {row['items']:5d} {row['elapsed_s']:6.1f} {len(row['wrong']):5d} "
              f"{row['rss_mb_first']!s:>12s} {row['rss_mb_max']!s:>5s}")
        for w in row["wrong"]:
            print(json.dumps(w, indent=1)[:3000])
        if row["wrong"]:
            print(row["log_tail"])
    settings = {k: v for k, v in vars(args).items() if k != "publish"}
    path = record("bench_cold_start", {"rounds": rounds}, settings, publish=args.publish,
                  measured_on=measured_on)
    print(f"wrote {path}")
    if any(r["wrong"] for r in rounds):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
