"""veRL: our compute_score loaded by veRL's own loader and called by its NaiveRewardManager
on a real DataProto, against the real server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import ServerProcess

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore::UserWarning")
ADAPTER = Path(__file__).resolve().parents[2] / "reward_server" / "adapters" / "verl.py"
ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def _rewards_requests(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.split()[1]) for line in text.splitlines()
               if line.startswith("reward_requests_total{") and '"/v1/rewards"' in line)


@pytest.fixture
def verl_env(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("REWARD_SERVER_URL", server.url)
    monkeypatch.setenv("REWARD_SERVER_BATCH_WAIT_MS", "50")
    return server.url


def test_compute_score_batches_concurrent_calls(verl_env: str) -> None:
    from reward_server.adapters import verl as adapter

    calls = [("openai/gsm8k", "#### 72", "72", None),
             ("lighteval/MATH", "\\boxed{\\frac12}", "0.5", {}),
             ("codecontests", ADD, json.dumps([{"input": "1 2", "output": "3"}]), None),
             ("my_set", "print(0)", json.dumps([{"input": "", "output": "1"}]),
              {"verifier": "code"}),
             ("gsm8k_custom", "it is 8", "9", {"reward_params": {"extract": "last_number"}})]
    before = _rewards_requests(verl_env)

    async def run() -> list[dict]:
        return await asyncio.gather(*(adapter.compute_score(*c) for c in calls))

    out = asyncio.run(run())
    assert [o["score"] for o in out] == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert [o["acc"] for o in out] == [True, True, True, False, False]
    assert _rewards_requests(verl_env) - before == 1  # five calls, one batched request
    sync = adapter.compute_score_sync("openai/gsm8k", "#### 3", "3")
    assert sync["score"] == 1.0
    # extra_info["question"] (veRL's preprocessing stores it): a copied question scores 0
    question = {"question": "Simplify $\\sqrt{50}$."}
    assert adapter.compute_score_sync("lighteval/MATH", "\\boxed{\\sqrt{50}}", "5\\sqrt{2}",
                                      question)["score"] == 0.0
    assert adapter.compute_score_sync("lighteval/MATH", "\\boxed{5\\sqrt{2}}", "5\\sqrt{2}",
                                      question)["score"] == 1.0


def test_verl_reward_manager_scores_a_dataproto(verl_env: str) -> None:
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from trainer.models import load_model

    config = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": str(ADAPTER), "name": "compute_score", "reward_kwargs": {}}}})
    compute_score = get_custom_reward_fn(config)
    _, tokenizer = load_model("tiny", torch.float32, 0)

    responses = ["it is 7", "it is 3", "it is 7", "maybe 5"]  # char tokenizer: digits only
    truths = ["7", "7", "7", "5"]
    enc = [tokenizer(r, add_special_tokens=False)["input_ids"] for r in responses]
    width = max(map(len, enc))
    prompt = torch.zeros(len(enc), 2, dtype=torch.long)
    response = torch.tensor([ids + [0] * (width - len(ids)) for ids in enc])
    mask = torch.tensor([[1, 1] + [1] * len(ids) + [0] * (width - len(ids)) for ids in enc])
    data = DataProto.from_dict(
        tensors={"prompts": prompt, "responses": response, "attention_mask": mask},
        non_tensors={
            "data_source": np.array(["openai/gsm8k"] * len(enc), dtype=object),
            "reward_model": np.array([{"ground_truth": t} for t in truths], dtype=object),
            "extra_info": np.array([{"reward_params": {"extract": "last_number"}}
                                    for _ in enc], dtype=object),
        })
    manager = NaiveRewardManager(config, tokenizer, compute_score)
    assert manager.is_async_reward_score  # veRL awaits it (and so many run at once)
    before = _rewards_requests(verl_env)

    async def run() -> list[dict]:
        return await asyncio.gather(*(manager.run_single(data[i:i + 1])
                                      for i in range(len(data))))

    out = manager.loop.run_until_complete(run())
    assert [o["reward_score"] for o in out] == [1.0, 0.0, 1.0, 1.0]
    assert [o["reward_extra_info"]["acc"] for o in out] == [True, False, True, True]
    assert _rewards_requests(verl_env) - before == 1
