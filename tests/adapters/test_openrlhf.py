"""OpenRLHF: its own remote-reward client code (openrlhf.utils.agent) against our
``POST /get_reward``. vLLM cannot run here, so the one stand-in is the generation engine."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import httpx
import pytest

from tests.conftest import ServerProcess

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def test_get_reward_protocol(http: httpx.Client) -> None:
    body = {"query": ["Q: 2+2? A: \\boxed{4}", "Q: 2+2? A: \\boxed{5}", "Q: sum A: " + ADD],
            "prompts": ["Q: 2+2? A: ", "Q: 2+2? A: ", "Q: sum A: "],
            "labels": ["4", json.dumps({"answer": "4"}),
                       json.dumps({"verifier": "code",
                                   "tests": [{"input": "1 2", "output": "3"}]})]}
    r = http.post("/get_reward", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["rewards"] == [1.0, 0.0, 1.0] and out["scores"] == out["rewards"]
    assert out["extra_logs"] == {"correct": [1.0, 0.0, 1.0], "unscorable": [0.0, 0.0, 0.0],
                                 "invalid": [0.0, 0.0, 0.0]}
    # the prompt is cut off: an answer inside the prompt is not the model's
    r = http.post("/get_reward", json={"query": ["The answer is \\boxed{4}. Now: 3"],
                                       "prompts": ["The answer is \\boxed{4}. Now: "],
                                       "labels": ["4"]},
                  params={"verifier": "math"})
    assert r.json()["rewards"] == [0.0]
    # the prompt is the question: its own expression copied is no answer
    prompt = "Simplify $\\sqrt{50}$. "
    r = http.post("/get_reward", json={
        "query": [prompt + "\\boxed{\\sqrt{50}}", prompt + "\\boxed{5\\sqrt{2}}"],
        "prompts": [prompt] * 2, "labels": ["5\\sqrt{2}"] * 2})
    assert r.json()["rewards"] == [0.0, 1.0]


def test_get_reward_bad_input_is_a_clear_4xx(http: httpx.Client) -> None:
    r = http.post("/get_reward", json={"query": ["a", "b"], "labels": ["1"]})
    assert r.status_code == 422 and "labels has 1 entries but query has 2" in r.text
    r = http.post("/get_reward", json={"query": ["a"], "labels": ["1"]},
                  params={"verifier": "chess"})
    assert r.status_code == 404 and "chess" in r.text
    r = http.post("/get_reward", json={"query": ["a"]})  # math without an answer
    assert r.status_code == 422 and "query[0]" in r.text


def test_an_over_long_response_is_that_querys_0_not_a_413_for_the_call(http: httpx.Client
                                                                        ) -> None:
    long = "p: " + "x" * (2 * 1024 * 1024 + 10) + " #### 7"
    r = http.post("/get_reward", json={"query": ["p: #### 7", long], "prompts": ["p: "] * 2,
                                       "labels": ["7", "7"]})
    assert r.status_code == 200, r.text[:300]
    assert r.json()["rewards"] == [1.0, 0.0]
    assert r.json()["extra_logs"]["invalid"] == [0.0, 0.0]


def test_get_reward_scores_the_good_queries_around_a_bad_label(http: httpx.Client) -> None:
    """A label no item takes is a 422 naming the query (OpenRLHF does not retry a 4xx, and
    its reward list has no null), or with ?on_invalid=zero a 0 that extra_logs counts."""
    good = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    body = {"query": ["p: #### 7", "p: x", "p: " + ADD, "p: y"], "prompts": ["p: "] * 4,
            "labels": ["7", json.dumps({"inputs": ["1"], "outputs": []}), good,
                       json.dumps({"tests": "nope"})]}
    r = http.post("/get_reward", json=body, params={"verifier": "code"})
    assert r.status_code == 422
    assert r.json()["detail"] == "labels[1]: input_output: 1 inputs but 0 outputs"
    r = http.post("/get_reward", json=body, params={"verifier": "code", "on_invalid": "zero"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["rewards"][1:] == [0.0, 1.0, 0.0]  # query 0 is no code item either
    assert out["extra_logs"]["invalid"] == [1.0, 1.0, 0.0, 1.0]


def test_openrlhf_executor_gets_rewards_from_us(server: ServerProcess) -> None:
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    from trainer.models import load_model

    # two URLs for one server: OpenRLHF shards a batch over its reward endpoints
    port = server.url.rsplit(":", 1)[1]
    urls = [f"{server.url}/get_reward", f"http://localhost:{port}/get_reward"]
    executor = SingleTurnAgentExecutor(urls)
    queries = [f"Q{i}: \\boxed{{{i}}}" for i in range(6)]
    prompts = [f"Q{i}: " for i in range(6)]
    labels = ["0", "1", "2", "0", "0", "0"]
    parts = asyncio.run(executor._fetch_rewards_via_http(queries, prompts, labels))
    assert [r for part in parts for r in part["rewards"]] == [1, 1, 1, 0, 0, 0]

    # the whole single-turn path: generate (a stand-in engine), decode, ask us, keep reward
    import torch
    _, tokenizer = load_model("tiny", torch.float32, 0)
    response = "so it is 7"  # the tiny char tokenizer has no backslash or braces
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]

    class Engine:
        async def generate(self, prompt_ids, params, multi_modal_data=None):
            out = SimpleNamespace(token_ids=response_ids, finish_reason="stop", logprobs=None)
            return SimpleNamespace(outputs=[out])

    params = SimpleNamespace(max_tokens=64, logprobs=None)
    label = json.dumps({"answer": "7", "extract": "last_number"})
    result = asyncio.run(executor.execute("say 3: ", label, params, 256, tokenizer, Engine()))
    assert result["reward"] == [1.0] and result["scores"] == [1.0]
    assert result["extra_logs"] == {"correct": [1.0], "unscorable": [0.0], "invalid": [0.0]}
