"""A JSONL log of scored items: what was sent, what came back, and what produced it.

One line per item::

    {"item": {"verifier": "math", "response": "...", "answer": "4"},
     "reward": 1.0, "result": {"verifier": "math", "status": "ok", ...},
     "provenance": {"verifier": "math", "fingerprint": "...", ...}}

Our trainer writes it (``log_rollouts``: ``<output_dir>/rollouts.jsonl``), any loop can with
``RolloutLog``, and ``reward-rescore`` reads it (and writes its output in the same shape, the
old verdict under ``previous``), so a run can be scored again after the server changed.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from reward_server.client import Rewards

FILE = "rollouts.jsonl"


def records(items: list[dict[str, Any]], scored: Rewards) -> list[dict[str, Any]]:
    """One record per item of a ``RewardClient.rewards`` call."""
    return [{"item": item, "reward": scored.rewards[i], "result": scored.results[i],
             "provenance": scored.provenance_of(i)} for i, item in enumerate(items)]


class RolloutLog:
    """Appends records to ``path``, a whole line at a time (scoring threads share it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, items: list[dict[str, Any]], scored: Rewards) -> None:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records(items, scored))
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(text)
