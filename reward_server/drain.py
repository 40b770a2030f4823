"""Stopping within a deadline. Kubernetes sends SIGTERM and kills the pod after its grace
period (30 s by default); a reward server with thousands of items queued must neither run
them for clients that will be gone nor be killed in the middle of what it runs.

On SIGTERM (or SIGINT) the server stops admission at once: every item waiting for a worker,
and every one that comes later, is answered 503 with ``Retry-After`` (``ServerStopping``:
it never ran, another replica runs it now). uvicorn stops accepting connections and gives
the requests in flight ``drain_s`` to finish (``timeout_graceful_shutdown``); what still
runs then is cancelled, the lifespan closes the pools and the process exits.

Our handler runs before uvicorn's own, which it chains to, so the gates close before the
server even starts its shutdown."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable
from typing import Any

from reward_server.fair_queue import stop_admission

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def watch_stop_signals() -> Callable[[], None]:
    """Close the gates on SIGTERM/SIGINT, then hand the signal to whoever handled it before
    (uvicorn). Returns the undo. Does nothing off the main thread (signals go to it only:
    the app embedded elsewhere, Ray Serve, keeps its host's handling)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def handler(sig: int, frame: Any) -> None:
        loop.call_soon_threadsafe(stop_admission)
        before = previous[sig]
        if callable(before):
            before(sig, frame)
        elif before == signal.SIG_DFL:  # nobody else handles it: its default, as before
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)

    def undo() -> None:
        for sig, before in previous.items():
            if signal.getsignal(sig) is handler:
                signal.signal(sig, before)

    return undo
