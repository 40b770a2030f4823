"""Trainer fixtures: the real reward server, a learnable task for the tiny model."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

from reward_server.client import RewardClient
from tests.conftest import ServerProcess

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def seven_rows(n: int = 64, seed: int = 0) -> list[dict[str, str]]:
    """A task a randomly initialised tiny model can learn in a few dozen steps: end the
    completion with the number 7 (scored by the math verifier, last-number mode)."""
    rng = random.Random(seed)
    return [{"prompt": "say 7: " + "".join(rng.choice("abcdefgh") for _ in range(3)),
             "answer": "7"} for _ in range(n)]


@pytest.fixture
def reward_client(server: ServerProcess) -> Iterator[RewardClient]:
    with RewardClient(server.url) as client:
        yield client
