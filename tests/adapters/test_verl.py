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
    assert [json.loads(o["provenance"])["verifier"] for o in out] == ["math"] * 2 + ["code"] * 2 \
        + ["math"]
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
    # what produced each reward travels to veRL's per-sample logs
    assert json.loads(out[0]["reward_extra_info"]["provenance"])["verifier"] == "math"
    assert _rewards_requests(verl_env) - before == 1


# veRL's code ground truth as its datasets store it (the row's input_output, which veRL's own
# prime_code and sandbox_fusion scorers read), one row per shape, each with a correct and a
# wrong solution. Written for the test in the datasets' published shapes.
SUM_PAIRS = "```python\nfor _ in range(int(input())):\n    print(sum(map(int, input().split())))\n```"
VERL_ROWS = {
    "codecontests, text": (
        "codecontests", {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]},
        ADD, "```python\nprint(0)\n```"),
    "apps, text with a blank line its grader drops": (
        "apps", {"inputs": ["2\n1 2\n3 4\n"], "outputs": ["3\n\n7\n"]},
        SUM_PAIRS, "```python\nprint(3)\nprint(8)\n```"),
    "apps, lines as lists": (
        "apps", {"inputs": [["2", "1 2", "3 4"]], "outputs": [["3", "7"]]},
        SUM_PAIRS, "```python\nprint(3)\nprint(8)\n```"),
    "taco, call with the argument list": (
        "taco", {"fn_name": "add", "inputs": [[1, 2], [5, -5]], "outputs": [[3], [0]]},
        "```python\ndef add(a, b):\n    return a + b\n```",
        "```python\ndef add(a, b):\n    return a - b\n```"),
    "primeintellect, one JSON argument per line, a Solution method": (
        "primeintellect", {"fn_name": "twoSum", "inputs": ["[2, 7, 11, 15]\n9", "[3, 3]\n6"],
                           "outputs": ["[0, 1]", "[0, 1]"]},
        "```python\nclass Solution:\n    def twoSum(self, nums, target):\n"
        "        seen = {}\n        for i, x in enumerate(nums):\n"
        "            if target - x in seen:\n                return [seen[target - x], i]\n"
        "            seen[x] = i\n```",
        "```python\nclass Solution:\n    def twoSum(self, nums, target):\n"
        "        return [0, 0]\n```"),
}

PRIME_CODE_READS = ("codecontests, text", "apps, text with a blank line its grader drops",
                    "primeintellect, one JSON argument per line, a Solution method")


def _prime_code_score(solution: str, ground_truth: dict) -> float:
    """veRL's own grader for these rows (APPS's testing_util), run in this process."""
    from verl.utils.reward_score import prime_code

    score, _ = prime_code.compute_score(solution, json.dumps(ground_truth), continuous=True)
    return float(score)


@pytest.mark.parametrize("row", list(VERL_ROWS))
@pytest.mark.parametrize("stored", ["json", "dict"])
def test_verl_code_ground_truth_as_its_datasets_store_it(verl_env: str, row: str,
                                                         stored: str) -> None:
    from reward_server.adapters import verl as adapter

    source, truth, good, bad = VERL_ROWS[row]
    ground_truth = json.dumps(truth) if stored == "json" else truth

    async def run() -> list[dict]:
        return await asyncio.gather(*(adapter.compute_score(source, s, ground_truth, {})
                                      for s in (good, bad)))

    scores = [o["score"] for o in asyncio.run(run())]
    assert scores == [1.0, 0.0], scores
    # veRL's own scorer agrees where it reads the row: its APPS copy takes stdin text only and
    # calls only with one JSON argument per line (the list shapes are APPS's own reading)
    if stored == "json" and row in PRIME_CODE_READS:
        assert [_prime_code_score(s, truth) for s in (good, bad)] == [1.0, 0.0]


def test_a_bad_call_raises_alone_and_its_batch_is_scored(verl_env: str) -> None:
    """Five good calls and one malformed one, concurrently, in one batched request: only the
    malformed call raises, naming the field; the five get their rewards."""
    from reward_server.adapters import verl as adapter

    calls = [("openai/gsm8k", f"#### {i}", str(i), None) for i in range(4)]
    calls.insert(2, ("codecontests", ADD, json.dumps({"tests": [{"input": "1 2"}]}), None))
    calls.append(("codecontests", ADD, json.dumps({"inputs": ["1 2"], "outputs": ["3"]}), None))
    before = _rewards_requests(verl_env)

    async def run() -> list:
        return await asyncio.gather(*(adapter.compute_score(*c) for c in calls),
                                    return_exceptions=True)

    out = asyncio.run(run())
    assert isinstance(out[2], adapter.InvalidItem), out
    assert str(out[2]) == "tests[0].output: Field required"
    assert [o["score"] for i, o in enumerate(out) if i != 2] == [1.0] * 5
    assert _rewards_requests(verl_env) - before == 1
    # a ground truth whose lists do not pair up raises for its own call, before any request
    with pytest.raises(ValueError, match="input_output: 2 inputs but 1 outputs"):
        asyncio.run(adapter.compute_score("apps", ADD, {"inputs": ["1", "2"],
                                                        "outputs": ["3"]}))


def test_a_batch_the_server_refuses_whole_is_split_to_the_call_at_fault(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request the server refuses as a whole (here: a body over its limit, because of one
    call's huge response) is halved until the call at fault is alone: only it raises."""
    from reward_server.adapters import verl as adapter
    from tests.conftest import run_server

    with run_server(tmp_path, env={"REWARD_SERVER_MAX_BODY_BYTES": "3000"}) as srv:
        monkeypatch.setenv("REWARD_SERVER_URL", srv.url)
        monkeypatch.setenv("REWARD_SERVER_BATCH_WAIT_MS", "50")
        calls = [("openai/gsm8k", f"#### {i}" + " " * 300, str(i), None) for i in range(6)]
        calls[4] = ("openai/gsm8k", "#### 4" + " " * 4000, "4", None)

        async def run() -> list:
            return await asyncio.gather(*(adapter.compute_score(*c) for c in calls),
                                        return_exceptions=True)

        out = asyncio.run(run())
    assert isinstance(out[4], adapter.InvalidItem) and "exceeds the limit" in str(out[4])
    assert [o["score"] for i, o in enumerate(out) if i != 4] == [1.0] * 5
