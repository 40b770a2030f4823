"""One caller holds the sandbox while another arrives: the two results, and which answer came
first (order read from events, never from the clock)."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from reward_server.testing import A, B, as_caller
from tests.helpers.metrics import counter, until_let_in

# The correct item that arrives second, by default.
ADD = {"response": "```python\ndef add(a, b):\n    return a + b\n```",
       "test_list": ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]}


def post(url: str, items: list[dict[str, Any]], source: str, out: dict[str, Any],
         finished: list[str]) -> threading.Thread:
    """POST as caller ``source`` (``as_caller``); appends ``source`` to ``finished`` when the
    answer is in."""
    def run() -> None:
        with httpx.Client(headers=as_caller(source), timeout=60) as client:
            out["response"] = client.post(url + "/v1/verify/code", json={"items": items},
                                          timeout=300)
        finished.append(source)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def hold_then_arrive(url: str, hog: dict[str, Any], victim: dict[str, Any] = ADD
                     ) -> tuple[dict, dict, list[str]]:
    """A sends ``hog``; once it holds a container (the gate granted it), B sends
    ``victim`` (a correct item). Both results, and the order in which the answers came."""
    granted = counter(url, "reward_queue_wait_seconds_count")
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    finished: list[str] = []
    threads = [post(url, [hog], A, a, finished)]
    until_let_in(url, granted, threads[0], f"(its answer: {a.get('response')})")
    threads.append(post(url, [victim], B, b, finished))
    for thread in threads:
        thread.join()
    return a["response"].json()["results"][0], b["response"].json()["results"][0], finished
