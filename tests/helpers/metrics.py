"""Reading a real server's /metrics, and waiting for a reading to come true."""

from __future__ import annotations

import asyncio
import re
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
