"""Several verifiers and the overlong penalty, each with a weight: one ``POST /v1/rewards`` per
chunk of completions, against the real server, and each its own column in the metrics."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import pytest
import torch

from reward_server.client import RewardClient
from tests.conftest import ServerProcess
from tests.trainer.conftest import seven_rows
from trainer.config import ConfigError, GRPOConfig, OverlongBuffer, RewardSpec, load_config
from trainer.models import load_model
from trainer.train import GRPOTrainer, seed_everything

SPECS = [
    RewardSpec(verifier="math", weight=1.0, params={"extract": "last_number"}),
    RewardSpec(verifier="format", name="think", weight=0.25, columns={},
               params={"rules": ["think"]}),
    RewardSpec(verifier="format", name="boxed", weight=0.5, columns={},
               params={"rules": [{"rule": "final_answer", "pattern": "boxed"}]}),
]


class CountingTransport(httpx.HTTPTransport):
    """The real transport, counting the requests it sends by path."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: Counter[str] = Counter()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.paths[request.url.path] += 1
        return super().handle_request(request)


def test_a_mixed_config_is_one_request_per_chunk(server: ServerProcess, tmp_path: Path) -> None:
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path),
                        rewards=SPECS, overlong_buffer=OverlongBuffer(len=3, penalty_factor=0.1),
                        num_generations=4, max_completion_length=6, prompts_per_step=3,
                        generation_chunk=1, micro_batch_size=12, progress_bar=False,
                        device="cpu")
    seed_everything(0)
    model, tokenizer = load_model("tiny", torch.float32, 0)
    transport = CountingTransport()
    client = RewardClient(server.url, transport=transport)
    trainer = GRPOTrainer(model, tokenizer, seven_rows(), config, client)
    try:
        metrics = trainer.training_step()
    finally:
        trainer.scorer.close()
        client.close()
    # three chunks of one prompt × 4 completions, each 3 verifier items per completion
    assert transport.paths == {"/v1/rewards": 3}
    means = {name: metrics[f"rewards/{name}/mean"]
             for name in ("math", "think", "boxed", "overlong")}
    for name in ("math", "think", "boxed"):
        assert metrics[f"rewards/{name}/unscorable_rate"] == 0.0
    # the total is the weighted sum of the columns (no nulls: the means add up)
    assert metrics["reward"] == pytest.approx(
        means["math"] + 0.25 * means["think"] + 0.5 * means["boxed"] + 0.1 * means["overlong"])


def test_two_specs_of_one_verifier_need_distinct_names() -> None:
    format_spec = {"verifier": "format", "columns": {}, "params": {"rules": ["think"]}}
    with pytest.raises(ConfigError, match="more than one reward is named 'format'.*'name'"):
        load_config(None, [f"rewards={[format_spec, format_spec]}"])
    named = [dict(format_spec, name="a"), dict(format_spec, name="b")]
    assert [s.label for s in load_config(None, [f"rewards={named}"]).rewards] == ["a", "b"]
    with pytest.raises(ConfigError, match="named 'overlong' .the overlong penalty's"):
        load_config(None, [f"rewards={[dict(format_spec, name='overlong')]}",
                           "overlong_buffer={len: 4}"])
