"""``grpo-train`` as a user runs it, with the network edge stood in for: a reward server
that scores every other completion 1 (unless ``STAND_IN_REWARDS=server``: then the real
client, and the server at ``reward_url``), and ``/dev/shm`` replaced by ``STAND_IN_SHM``
where set (what a run leaves there is then the test's to see)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import reward_server.client
from trainer.engine import client


class RewardClient:
    """What the trainer asks of ``reward_server.client.RewardClient``."""

    def __init__(self, urls: object, **options: object) -> None:
        pass

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def health(self) -> dict[str, str]:
        return {"status": "ok"}

    def close(self) -> None:
        return None

    def abort(self) -> None:
        return None

    def rewards(self, items: list[Any]) -> Any:
        class Result:
            rewards = [float(i % 2) for i in range(len(items))]

        return Result()


if __name__ == "__main__":
    # a background job's SIGINT is ignored (a shell's `&`): a terminal's Ctrl-C is not
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("STAND_IN_REWARDS") != "server":
        reward_server.client.RewardClient = RewardClient  # type: ignore[misc]
    if "STAND_IN_SHM" in os.environ:
        client._SHARED_MEMORY = Path(os.environ["STAND_IN_SHM"])
    from trainer.cli import main

    sys.exit(main(sys.argv[1:]))
