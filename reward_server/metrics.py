"""Prometheus metrics, one set per process (multi-process mode when uvicorn forks workers)."""

from __future__ import annotations

import os
from collections.abc import Hashable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Summary,
    generate_latest,
    multiprocess,
)

from reward_server.callers import quota_key

REQUESTS = Counter(
    "reward_requests_total", "HTTP requests by route and status code", ["route", "code"]
)
REQUEST_LATENCY = Histogram(
    "reward_request_seconds", "HTTP request latency by route", ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ITEMS = Counter(
    "reward_items_total", "Items scored, by verifier and status", ["verifier", "status"]
)
# A status is the verifier's word, and a plug-in's check may let the completion choose it:
# each verifier's first MAX_STATUSES short ones are labels, any other is counted as "other"
# (every new label is a series kept for the process's life, in memory and in each scrape)
MAX_STATUSES = 64
_STATUS_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
_statuses: dict[str, set[str]] = {}


def count_items(verifier: str, status: str, count: int = 1) -> None:
    """``count`` items of ``verifier`` scored with ``status``, on ``reward_items_total``."""
    ITEMS.labels(verifier, status_label(verifier, status)).inc(count)


def status_label(verifier: str, status: str) -> str:
    """``status`` as a label of ``verifier``'s series, or ``other``."""
    seen = _statuses.setdefault(verifier, set())
    if status in seen:
        return status
    if len(seen) < MAX_STATUSES and 0 < len(status) <= 40 and set(status) <= _STATUS_CHARS:
        seen.add(status)
        return status
    return "other"
ITEM_LATENCY = Histogram(
    "reward_item_seconds", "Time to score one item (cache hits included)", ["verifier"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
TIMEOUTS = Counter("reward_timeouts_total", "Items that ran past their time limit", ["verifier"])
CACHE_HITS = Counter(
    "reward_cache_hits_total", "Items answered from the result cache", ["verifier"]
)
WORKER_CRASHES = Counter(
    "reward_worker_crashes_total", "Checker processes that died under a task (then replaced)"
)
POOL_REBUILDS = Counter(
    "reward_pool_rebuilds_total", "Checker pools rebuilt after a broken pool or a lost task"
)
CACHE_MISSES = Counter("reward_cache_misses_total", "Items computed afresh", ["verifier"])

# Fair scheduling (reward_server/fair_queue.py): who is waiting for whom.
REQUESTS_IN_FLIGHT = Gauge(
    "reward_requests_in_flight", "Scoring requests being answered", multiprocess_mode="livesum"
)
QUEUE_WAIT = Histogram(
    "reward_queue_wait_seconds", "Time an item waited for a worker (math process, sandbox "
    "container), by verifier", ["verifier"],
    buckets=(0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
QUEUE_WAITING = Gauge(
    "reward_queue_items_waiting", "Items waiting for a worker, by verifier", ["verifier"],
    multiprocess_mode="livesum",
)
QUEUE_REQUESTS = Gauge(
    "reward_queue_requests", "Requests with items waiting for or holding a worker, by "
    "verifier", ["verifier"], multiprocess_mode="livesum",
)
REQUESTS_DROPPED = Counter(
    "reward_requests_dropped_total", "Requests whose client hung up before the answer: their "
    "waiting items left the queue and their running ones were stopped",
)
BUDGET_CUTS = Counter(
    "reward_budget_cuts_total", "Items not run because their request's budget ran out",
    ["verifier"],
)
TURNS_YIELDED = Counter(
    "reward_turns_yielded_total", "Times an item went back to the gate between two of its "
    "tests, its turn over, to run the rest in a later turn", ["verifier"],
)
TIMEOUTS_REMEMBERED = Counter(
    "reward_timeouts_remembered_total", "Items answered 'timeout' from a remembered timeout "
    "of the same item, without running", ["verifier"],
)


SANDBOX_ENGINES = Gauge(
    "reward_sandbox_engines", "The sandbox's Docker engines by what their last health check "
    "found: serves, wedged (its ping answered, /info not: nothing can be started there), gone",
    ["state"], multiprocess_mode="livemax",
)

# Stateful sessions (reward_server/run_code/sessions.py): each holds a container of its own.
SESSIONS_OPEN = Gauge(
    "reward_sessions_open", "Sessions open (each holding a sandbox container)",
    multiprocess_mode="livesum",
)
SESSIONS_REMOVING = Gauge(
    "reward_sessions_removing", "Sessions ended whose containers are still being removed (in "
    "their callers' turns at the sandbox's gate); they count against the session caps until "
    "removed", multiprocess_mode="livesum",
)
SESSIONS_CLOSED = Counter(
    "reward_sessions_closed_total", "Sessions ended, by why: closed, expired, lost, shutdown",
    ["reason"],
)
SESSION_CELLS = Counter(
    "reward_session_cells_total", "Session cells run, by status (Finished, "
    "TimeLimitExceeded, Error, SandboxError)", ["status"],
)
SESSION_CELL_LATENCY = Histogram(
    "reward_session_cell_seconds", "Time to run one session cell, round trip from the server",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
# Per caller (reward_server/quotas.py): what each holds and how long its items wait. A caller
# is labelled by its quota (a token's name, or an address's: 'loopback'); at most
# MAX_LABELLED callers at a time get series of their own, the rest none (an address-keyed
# server may see any number of clients, and each label is a series per metric for good).
CALLER_REQUESTS = Gauge(
    "reward_caller_requests_in_flight", "Requests in flight, by caller", ["caller"],
    multiprocess_mode="livesum",
)
CALLER_ITEMS = Gauge(
    "reward_caller_items_in_flight", "Items in flight (taken, not yet answered), by caller",
    ["caller"], multiprocess_mode="livesum",
)
CALLER_QUEUE_WAIT = Summary(
    "reward_caller_queue_wait_seconds", "Time an item waited for a worker, by caller",
    ["caller"],
)
CONNECTIONS = Counter(
    "reward_connections_closed_total", "Connections closed by the server for room "
    "(reward_server/connections.py): 'evicted' (an idle one of the address holding the most), "
    "'refused' (a new one when every connection was busy)", ["reason"],
)
REQUESTS_REFUSED = Counter(
    "reward_requests_refused_total", "Requests answered 429 for a cap on what is in flight, "
    "by the cap's setting", ["limit"],
)
MAX_LABELLED = 64
_labels: dict[Hashable, str | None] = {}
_labelled = 0


def caller_label(caller: Hashable) -> str | None:
    """The caller's label, or None when MAX_LABELLED others hold one (no series for it)."""
    global _labelled
    key = quota_key(caller)
    if key not in _labels:
        name = "anonymous" if key is None else str(key)
        _labels[key] = name if _labelled < MAX_LABELLED else None
        _labelled += _labels[key] is not None
    return _labels[key]


def forget_caller(caller: Hashable) -> None:
    """The caller has nothing in flight and is forgotten: its series go, its label frees."""
    global _labelled
    label = _labels.pop(quota_key(caller), None)
    if label is not None:
        _labelled -= 1
        for metric in (CALLER_REQUESTS, CALLER_ITEMS, CALLER_QUEUE_WAIT):
            try:
                metric.remove(label)
            except KeyError:
                pass


def exposition() -> tuple[bytes, str]:
    """The text exposition; aggregates all workers when PROMETHEUS_MULTIPROC_DIR is set."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    from prometheus_client import REGISTRY

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
