"""A server's ``Retry-After``, read the way both clients (``client``, ``tool_client``) wait
it out; httpx only, as those clients need nothing else of the server."""

from __future__ import annotations

import email.utils
import math
import random
import time

import httpx

RETRY_AFTER_JITTER = 0.5  # a Retry-After of s is waited s × U(1, 1 + this)


def retry_after_s(response: httpx.Response) -> float | None:
    """The response's ``Retry-After`` in seconds (delay-seconds, or an HTTP date), or None
    when it has none or one that cannot be read."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def jittered(seconds: float) -> float:
    """How long to wait for a Retry-After of ``seconds``: times U(1, 1 + RETRY_AFTER_JITTER),
    so the many clients told the same second do not all come back in it."""
    return seconds * random.uniform(1.0, 1.0 + RETRY_AFTER_JITTER)
