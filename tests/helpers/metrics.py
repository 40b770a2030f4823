"""Reading a real server's /metrics, and waiting for a reading to come true."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import httpx


def metric(url: str, pattern: str) -> float:
    """The value of the sample whose name and labels match ``pattern`` (a regex); 0 if none."""
    text = httpx.get(url + "/metrics", timeout=60).text
    match = re.search(rf"^{pattern} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def counter(url: str, name: str) -> float:
    """The code verifier's sample of ``name``; 0 if none."""
    text = httpx.get(url + "/metrics", timeout=60).text
    match = re.search(rf'^{name}{{verifier="code"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def until_let_in(url: str, granted: float, holder: threading.Thread, what: str = "") -> None:
    """Until the code gate has let in one more item than ``granted`` (its count before the
    holder's request), the holder's. A holder that ended first must have been let in just
    before (else it was answered without the gate: ``what`` says how); one never let in
    fails after 300 s rather than hanging the run."""
    deadline = time.monotonic() + 300
    while counter(url, "reward_queue_wait_seconds_count") <= granted:
        assert time.monotonic() < deadline, "the holder was never let in"
        if not holder.is_alive():
            assert counter(url, "reward_queue_wait_seconds_count") > granted, \
                f"the holder was done without being let in {what}"
            return
        time.sleep(0.05)


def waiting(url: str) -> float:
    """Code items waiting at the gate."""
    return metric(url, r'reward_queue_items_waiting\{verifier="code"\}')


async def until(check, what: str, within_s: float = 30.0) -> None:
    """Polls ``check`` (run off the loop) until it is true; fails naming ``what`` if it is
    not within ``within_s`` (a guard against a hang, not a bound asserted)."""
    deadline = time.monotonic() + within_s
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.1)
