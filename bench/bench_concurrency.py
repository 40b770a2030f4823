"""A rollout fleet's burst: N one-item requests in flight at once against one reward server,
as veRL's reward loop, NeMo RL or prime-rl send them (one request per rollout, all at the end
of a generation step), with ``/healthz`` probed every 50 ms from a process of its own.

Each request is its own connection and one math item of a plain integer (answered in the
server process: what is measured is the server's per-request cost and its loop, not the
checker); a third of them are wrong, so a wrong reward would show. Per N: requests/s (N over
the wall time from the first send to the last answer), latency p50/p99 against N/throughput
(the wait a fair FIFO server would give the last request), the worst and p99 ``/healthz``,
errors (a non-200, or a refused request: the caps are set above N here), wrong rewards, the
server's RSS before and after, and the server's and the client's CPU seconds. Every burst's
items are new (no cached answer); a fresh server's first burst is reported apart.

``--code-every K``: every K-th request is a code item instead (a one-line Python program
run against one test in the sandbox, a third of them wrong too): K=4 is the issue's "25%
code" burst, whose pace the sandbox's containers set, not the loop.

``--victim``: the stream victim. One power tower (runs into the math time limit) every 0.4 s
from the caller's address for ``--stream-s`` seconds, then that caller's batch of 8 honest
SymPy items (surds, checked in a math worker): how long it waited, how many came back right.

    python -m bench.bench_concurrency [--n 1000 4000 16000] [--victim] [--stream-s 30]
                                      [--workers 1] [--code-every 4]
                                      [--baseline OLD_CHECKOUT] [--publish]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.costs import tree_cpu_s, tree_rss_mb
from bench.record import commit, record
from reward_server.testing import run_server, wait_for_sandbox

PROBE_EVERY_S = 0.05


CODE_EVERY = 0  # every K-th request is a code item (``--code-every``); 0: none


def path_of(k: int) -> str:
    return "/v1/verify/code" if CODE_EVERY and k % CODE_EVERY == 0 else "/v1/verify/math"


def body(k: int) -> bytes:
    answer = k if k % 3 else k + 1  # every third is wrong
    if path_of(k).endswith("/code"):
        return json.dumps({"items": [{"response": f"```python\nprint({k})\n```",
                                      "tests": [{"input": "", "output": str(answer)}]}]}
                          ).encode()
    return json.dumps({"items": [{"response": f"The answer is \\boxed{{{k}}}",
                                  "answer": str(answer)}]}).encode()


def expected(k: int) -> float:
    return 0.0 if k % 3 == 0 else 1.0


async def one(port: int, k: int) -> tuple[float, int, float | None]:
    """POST one request on a connection of its own: (latency s, status, score)."""
    payload = body(k)
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path_of(k)} HTTP/1.1\r\nhost: bench\r\n".encode()
                 + b"content-type: application/json\r\nconnection: close\r\n"
                 + f"content-length: {len(payload)}\r\n\r\n".encode() + payload)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    latency = time.perf_counter() - started
    head, _, rest = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    score = None
    if status == 200:
        score = json.loads(rest)["results"][0]["score"]
    return latency, status, score


def probe(port: int, stop: Any, out: Any) -> None:
    """In a process of its own (the client's loop must not delay it): GET /healthz every
    PROBE_EVERY_S on a fresh connection; the latencies."""
    latencies = []
    while not stop.is_set():
        started = time.perf_counter()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nhost: probe\r\nconnection: close\r\n\r\n")
                while s.recv(65536):
                    pass
            latencies.append(time.perf_counter() - started)
        except OSError:
            latencies.append(float("inf"))
        time.sleep(PROBE_EVERY_S)
    out.put(latencies)


def burst(port: int, n: int, server: psutil.Process, first: int = 0) -> dict[str, Any]:
    """``n`` requests at once, of items ``first``.. (new ones each burst: no cached answer)."""
    ctx = multiprocessing.get_context("spawn")
    stop, out = ctx.Event(), ctx.Queue()
    prober = ctx.Process(target=probe, args=(port, stop, out), daemon=True)
    prober.start()
    time.sleep(1.0)  # a few probes of the idle server first
    rss_before = round(tree_rss_mb(server), 1)
    server_cpu = tree_cpu_s(server)
    client_cpu = time.process_time()

    async def all_of_them() -> tuple[float, list[tuple[float, int, float | None]]]:
        started = time.perf_counter()
        answers = await asyncio.gather(*(one(port, first + k) for k in range(n)),
                                       return_exceptions=True)
        return time.perf_counter() - started, answers  # type: ignore[return-value]

    wall, answers = asyncio.run(all_of_them())
    client_cpu = time.process_time() - client_cpu
    server_cpu = tree_cpu_s(server) - server_cpu
    time.sleep(0.5)
    stop.set()
    probes = out.get(timeout=120)
    prober.join(timeout=30)
    ok = [a for a in answers if not isinstance(a, BaseException) and a[1] == 200]
    errors = [a for a in answers if isinstance(a, BaseException) or a[1] != 200]
    wrong = sum(1 for k, a in enumerate(answers, first)
                if not isinstance(a, BaseException) and a[1] == 200 and a[2] != expected(k))
    latencies = sorted(a[0] for a in ok) or [float("nan")]
    probes_sorted = sorted(probes) or [float("nan")]
    throughput = n / wall

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return {
        "n": n, "wall_s": round(wall, 2), "requests_per_s": round(throughput, 1),
        "p50_s": round(pct(latencies, 0.5), 3), "p99_s": round(pct(latencies, 0.99), 3),
        "fifo_wait_s": round(n / throughput, 3),
        "p99_over_fifo_wait": round(pct(latencies, 0.99) / (n / throughput), 2),
        "healthz_worst_ms": round(1000 * probes_sorted[-1], 1),
        "healthz_p99_ms": round(1000 * pct(probes_sorted, 0.99), 1),
        "healthz_probes": len(probes),
        "errors": len(errors),
        "error_examples": sorted({repr(e)[:120] if isinstance(e, BaseException) else str(e[1])
                                  for e in errors})[:5],
        "wrong_rewards": wrong,
        "server_cpu_s": round(server_cpu, 2), "client_cpu_s": round(client_cpu, 2),
        "server_cpu_ms_per_request": round(1000 * server_cpu / n, 3),
        "rss_mb_before": rss_before, "rss_mb_after": round(tree_rss_mb(server), 1),
    }


def victim(url: str, stream_s: float) -> dict[str, Any]:
    """A stream of slow one-item requests, then a batch of 8 honest items from the same
    caller: the batch's wait and how many came back right."""
    stop = threading.Event()
    sent = [0]

    def post_quietly(client: httpx.Client, tower: dict[str, str]) -> None:
        try:  # the stream's answers are not the figure; one cut off as it stops is no error
            client.post(url + "/v1/verify/math", json={"items": [tower]})
        except httpx.HTTPError:
            pass

    def stream() -> None:
        with httpx.Client(timeout=600) as client:
            threads = []
            k = 0
            while not stop.is_set():
                tower = {"response": f"\\boxed{{{3 + k % 5}^{{{5 + k % 4}^{{{7 + k // 20}^{{9}}}}}}}}",
                         "answer": "3"}
                thread = threading.Thread(target=post_quietly, args=(client, tower),
                                          daemon=True)
                thread.start()
                threads.append(thread)
                k += 1
                sent[0] = k
                stop.wait(0.4)

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    time.sleep(stream_s)
    # answers that need SymPy in a worker (a surd against its simplified form), as the
    # stream's towers do
    honest = [{"response": f"\\boxed{{\\sqrt{{{2 * k * k}}}}}", "answer": f"{k}\\sqrt{{2}}"}
              for k in range(2, 10)]
    started = time.perf_counter()
    r = httpx.post(url + "/v1/verify/math", json={"items": honest}, timeout=600)
    waited = time.perf_counter() - started
    stop.set()
    right = sum(1 for x in r.json()["results"] if x["score"] == 1.0) if r.status_code == 200 else 0
    return {"stream_s": stream_s, "stream_requests_before_batch": sent[0],
            "batch_wait_s": round(waited, 2), "batch_right": right, "batch_items": 8}


def measure(args: argparse.Namespace, code: str | None) -> dict[str, Any]:
    """Every burst (and the victim) against a fresh server of this checkout, or of the
    checkout at ``code`` (put first on its PYTHONPATH)."""
    env = {"REWARD_SERVER_MAX_REQUESTS_PER_CALLER": str(2 * max(args.n)),
           "REWARD_SERVER_LOG_LEVEL": "warning", "REWARD_SERVER_MATH_TIMEOUT_S": "3",
           "REWARD_SERVER_WORKERS": str(args.workers)}
    if code is not None:
        env["PYTHONPATH"] = str(Path(code).resolve())
    runs = []
    with run_server(Path(tempfile.mkdtemp()), env=env, startup_s=300) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        server = psutil.Process(srv.proc.pid)
        httpx.post(srv.url + "/v1/verify/math", content=body(1),
                   headers={"content-type": "application/json"}, timeout=120)
        if CODE_EVERY:
            wait_for_sandbox(srv.url, timeout_s=300)
        # a fresh server's first burst costs about twice a later one's: reported apart
        first = 10**6
        cold = burst(port, args.n[0], server, first)
        print("cold", json.dumps(cold), flush=True)
        for n in args.n:
            first += n
            runs.append(burst(port, n, server, first))
            print(json.dumps(runs[-1]), flush=True)
        out: dict[str, Any] = {"first_burst_after_start": cold, "bursts": runs}
        if args.victim and code is None:  # (a baseline's workers would run this code)
            out["victim"] = victim(srv.url, args.stream_s)
            print(json.dumps(out["victim"]), flush=True)
    out["healthz_worst_ms_max"] = max(r["healthz_worst_ms"] for r in runs)
    out["errors"] = sum(r["errors"] for r in runs)
    out["wrong_rewards"] = sum(r["wrong_rewards"] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 4000, 16000])
    ap.add_argument("--victim", action="store_true")
    ap.add_argument("--workers", type=int, default=1, help="uvicorn processes")
    ap.add_argument("--stream-s", type=float, default=30.0)
    ap.add_argument("--code-every", type=int, default=0, metavar="K",
                    help="every K-th request a code item (4: a quarter)")
    ap.add_argument("--baseline", metavar="CHECKOUT", help="another checkout (an older "
                    "commit's worktree) measured first, the same way: ratios in one run")
    ap.add_argument("--publish", action="store_true")
    args = ap.parse_args()
    global CODE_EVERY
    CODE_EVERY = args.code_every
    measured_on = commit()
    out = measure(args, None)
    if args.baseline:
        base = measure(args, args.baseline)
        out["baseline"] = base
        out["ratios_to_baseline"] = [
            {"n": this["n"],
             "requests_per_s": round(this["requests_per_s"] / then["requests_per_s"], 2),
             "healthz_worst": round(this["healthz_worst_ms"] / then["healthz_worst_ms"], 3)}
            for this, then in zip(out["bursts"], base["bursts"], strict=True)]
        print(json.dumps(out["ratios_to_baseline"]), flush=True)
    name = "concurrency" if args.workers == 1 else f"concurrency_workers{args.workers}"
    if args.code_every:
        name += f"_code_every{args.code_every}"
    path = record(name, out, {"n": args.n, "victim": args.victim, "workers": args.workers,
                                       "stream_s": args.stream_s, "baseline": args.baseline,
                                       "code_every": args.code_every,
                                       "cpus": os.cpu_count(), "connection_per_request": True},
                  publish=args.publish, measured_on=measured_on)
    print(path)


if __name__ == "__main__":
    main()
