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


@pytest.fixture(scope="session")
def vllm_engine() -> Iterator[object]:
    """One vLLM engine per test session (it takes seconds to start and a gigabyte), on the
    tiny model with 32-dimensional heads (the least vLLM's CPU attention takes); each run
    that uses it loads its own policy's weights first. Without vLLM's environment the tests
    skip on a developer's machine and fail in CI."""
    from trainer.engine.client import DEFAULT_PYTHON, EngineSettings, VLLMEngine
    from trainer.engine.weights import policy_weights
    from trainer.models import tiny_model, tiny_tokenizer

    if not DEFAULT_PYTHON.exists():
        message = "no vLLM environment: bash scripts/setup_vllm.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    model = tiny_model(tiny_tokenizer(), heads=2)
    with policy_weights(model) as weights:
        # bounds of the tiny model's, well inside pytest's 20 minutes: an engine that stops
        # answering fails the test that met it and is ended, and the rest fail at once
        engine = VLLMEngine(model, EngineSettings(max_model_len=512, max_num_seqs=64,
                                                  kv_cache_gb=1, start_timeout_s=600,
                                                  request_timeout_s=300), weights)
    with engine:
        yield engine
