"""A plug-in verifier whose ``check`` does what a hostile response can make a careless check
do: loop, eat memory, raise, or work slowly; for the tests of what the core's pipeline gives
every plug-in (reward_server/pipeline.py). Loaded with ``REWARD_SERVER_PLUGINS``."""

from __future__ import annotations

import time
from typing import Literal

from reward_server.verifiers import ItemBase, ResultBase, Verifier


class HostileItem(ItemBase):
    response: str


class HostileResult(ResultBase):
    score: float
    status: Literal["ok"]


class HostileVerifier(Verifier):
    name = "hostile"
    item_model = HostileItem
    result_model = HostileResult
    check_timeout_s = 3.0
    check_memory_mb = 256
    check_workers = 1  # one at a time: the fair share between callers is what shows

    def check(self, item: HostileItem) -> HostileResult:  # type: ignore[override]
        if item.response == "loop":
            while True:
                pass
        if item.response == "memory":
            hoard = [bytearray(64 << 20) for _ in range(64)]
            return HostileResult(score=float(len(hoard)), status="ok")
        if item.response == "raise":
            raise ValueError("the check cannot read this response")
        if item.response.startswith("slow"):
            end = time.process_time() + 1.0  # a second of CPU, its own work
            while time.process_time() < end:
                pass
        if item.response == "wrong type":
            return 1.0  # type: ignore[return-value]
        return HostileResult(score=1.0, status="ok")
