"""Math checker processes killed from outside (the OOM killer, an operator) while a batch is
being scored: each is replaced, its task runs again (as often as it is killed, up to the
pool's limit), and the batch completes with every verdict right; nothing is blamed on the
response. The items need a worker: plain numbers and fractions take the fast path."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import psutil

from reward_server.client import RewardClient
from reward_server.process_pool import SPARE_WORKERS
from reward_server.settings import Settings
from reward_server.verifiers.math import MathItem, MathResult, MathVerifier
from tests.conftest import run_server

PROCESSES = 2 + SPARE_WORKERS  # REWARD_SERVER_MATH_WORKERS=2, plus the warm spare


def _workers(server_pid: int) -> list[psutil.Process]:
    """The math pool's processes, by the name its workers give themselves (the other
    verifiers' pools fork from the same forkserver, a child of the server)."""
    found = []
    for child in psutil.Process(server_pid).children(recursive=True):
        try:  # a killed worker not yet reaped is a zombie
            if child.status() != psutil.STATUS_ZOMBIE and child.name() == "math-worker":
                found.append(child)
        except psutil.Error:
            continue
    return found


def test_killed_math_workers_are_replaced_and_the_batch_completes(tmp_path: Path) -> None:
    n = 300
    items = [{"verifier": "math", "response": f"\\boxed{{{i} + \\sqrt{{2}}}}",
              "answer": f"\\sqrt{{2}} + {i}" if i % 3 else f"\\sqrt{{3}} + {i}"}
             for i in range(n)]
    expected = [0.0 if i % 3 == 0 else 1.0 for i in range(n)]
    env = {"REWARD_SERVER_CACHE_SIZE": "0", "REWARD_SERVER_MATH_WORKERS": "2"}
    verifier = MathVerifier(Settings())
    jobs = [verifier.triage(MathItem(response=it["response"], answer=it["answer"]))
            for it in items]
    assert not any(isinstance(job, MathResult) for job in jobs)  # none takes the fast path
    with run_server(tmp_path, env=env) as srv:
        with RewardClient(srv.url) as client:  # pebble starts its workers on first use
            assert client.rewards(items[:30]).rewards == expected[:30]
        assert len(_workers(srv.proc.pid)) == PROCESSES
        out: dict[str, object] = {}

        def score() -> None:
            with RewardClient(srv.url, batch_size=n) as client:
                out["result"] = client.rewards(items)

        caller = threading.Thread(target=score)
        caller.start()
        killed: set[int] = set()
        while caller.is_alive() and len(killed) < 4:
            time.sleep(0.3)
            for worker in _workers(srv.proc.pid)[:1]:
                if worker.pid not in killed:
                    worker.kill()
                    killed.add(worker.pid)
        caller.join(timeout=300)
        assert len(killed) >= 2, "the batch finished before the workers could be killed"

        result = out["result"]
        assert result.rewards == expected  # type: ignore[attr-defined]
        statuses = {r["status"] for r in result.results}  # type: ignore[attr-defined]
        assert statuses == {"ok"}, statuses

        deadline = time.monotonic() + 30  # replacements are up, none of the killed is
        while len(_workers(srv.proc.pid)) != PROCESSES and time.monotonic() < deadline:
            time.sleep(0.2)
        now = {p.pid for p in _workers(srv.proc.pid)}
        assert len(now) == PROCESSES and not now & killed
        metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
        noticed = sum(float(line.split()[1]) for line in metrics.splitlines()
                      if line.startswith(("reward_worker_crashes_total ",
                                          "reward_pool_rebuilds_total ")))
        assert noticed >= 1  # each death shows as a crash (task retried) or a pool rebuild
        with RewardClient(srv.url) as client:
            assert client.rewards(items[:30]).rewards == expected[:30]
