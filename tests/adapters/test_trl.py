"""TRL: our reward function object inside TRL's own GRPOTrainer, against the real server."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from reward_server.adapters.trl import ServerReward
from tests.conftest import ServerProcess, free_port, verify_code

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

CODE_TESTS = json.dumps([{"input": "2 3", "output": "5"}])
ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def why_code_scored(server: ServerProcess, completions: list[str],
                    languages: list[str | None]) -> str:
    """The server's whole results for these completions (its cache answers with the verdicts
    just given: statuses, times, stderr) and its log's tail: what a failure needs to be read
    (a correct program scored 0 once, in one CI run, and never again in 50 tries)."""
    results = verify_code(server.url, *(
        {"response": text, "tests": json.loads(CODE_TESTS)} | ({"language": lang} if lang else {})
        for text, lang in zip(completions, languages, strict=True)))
    return f"results: {results}\nserver log: {server.log.read_text()[-3000:]}"


def test_scores_a_batch_with_dataset_columns_passed_through(server: ServerProcess) -> None:
    math = ServerReward(server.url, verifier="math")
    code = ServerReward([server.url], verifier="code", name="code_ok")
    renamed = ServerReward(server.url, verifier="math", columns={"solution": "answer"},
                           params={"extract": "last_number"})
    logged: dict[str, float] = {}
    extra: dict[str, list] = {}

    async def run() -> tuple[list, list, list]:
        try:
            return await asyncio.gather(
                math(prompts=["p"] * 3,
                     completions=["\\boxed{4}", [{"role": "assistant", "content": "\\boxed{5}"}],
                                  "no answer"],
                     answer=["4", "4", "4"], difficulty=["easy"] * 3,
                     log_metric=logged.__setitem__, log_extra=extra.__setitem__),
                code(prompts=["p"] * 2, completions=[ADD, "print(0)"],
                     tests=[CODE_TESTS, CODE_TESTS], language=["python", None]),
                renamed(prompts=["p"], completions=["it is 12"], solution=["12"]),
            )
        finally:
            for f in (math, code, renamed):
                await f.aclose()

    m, c, r = asyncio.run(run())
    assert m == [1.0, 0.0, 0.0] and r == [1.0]
    assert c == [1.0, 0.0], why_code_scored(server, [ADD, "print(0)"], ["python", None])
    assert code.__name__ == "code_ok" and math.__name__ == "math_reward"
    assert logged == {"math_reward/unscorable_rate": 0.0}
    # TRL's completions table gets what a later re-score needs: the item beside the
    # completion, its status and what produced it
    assert [json.loads(i) for i in extra["math_reward/item"]] == [
        {"verifier": "math", "answer": "4", "question": "p"}] * 3
    assert extra["math_reward/status"] == ["ok", "ok", "no_answer"]
    blocks = [json.loads(p) for p in extra["math_reward/provenance"]]
    assert {b["verifier"] for b in blocks} == {"math"} and len(blocks) == 3


def test_a_rollout_a_tool_outage_shaped_gets_no_reward(server: ServerProcess) -> None:
    """TRL passes the rollouts' environments; one whose sandbox session saw an outage (a call
    the sandbox could not answer, not the policy's doing) scores None, right answer or not."""

    class Env:
        def __init__(self, outages: int) -> None:
            self.outages = outages

    reward = ServerReward(server.url, verifier="math")

    async def run() -> list[float | None]:
        try:
            return await reward(prompts=["p"] * 3, completions=["\\boxed{4}"] * 3,
                                answer=["4"] * 3, environments=[Env(0), Env(1), Env(0)])
        finally:
            await reward.aclose()

    assert asyncio.run(run()) == [1.0, None, 1.0]


def test_the_prompt_travels_as_the_question(server: ServerProcess) -> None:
    """A copied question ("Simplify $\\sqrt{50}$" answered \\sqrt{50}) is paid by
    math-verify; the prompt TRL passes lets the server refuse it."""
    math = ServerReward(server.url, verifier="math")
    prompt = [{"role": "user", "content": "Simplify $\\sqrt{50}$."}]

    async def run() -> list:
        try:
            return await math(prompts=[prompt] * 2,
                              completions=["\\boxed{\\sqrt{50}}", "\\boxed{5\\sqrt{2}}"],
                              answer=["5\\sqrt{2}"] * 2)
        finally:
            await math.aclose()

    assert asyncio.run(run()) == [0.0, 1.0]


def test_apps_input_output_column_and_a_bad_row_cost_no_other_reward(server: ServerProcess
                                                                      ) -> None:
    """A TACO/APPS dataset's own ``input_output`` column is the tests, read as APPS reads it;
    a row whose columns no item takes (its lists do not pair up, or a test misses a field)
    is None with a warning naming it, and the rows around it are scored."""
    code = ServerReward(server.url, verifier="code")
    good = json.dumps({"inputs": ["2 3\n"], "outputs": ["5\n"]})
    calls = json.dumps({"fn_name": "add", "inputs": [[1, 2]], "outputs": [[3]]})
    columns = {"input_output": [good, json.dumps({"inputs": ["1"], "outputs": []}), calls,
                                good, None],
               "tests": [None, None, None, None, [{"input": "2 3"}]]}
    completions = [ADD, ADD, "```python\ndef add(a, b):\n    return a + b\n```", "print(1)",
                   ADD]

    async def run() -> list:
        try:
            return await code(prompts=["p"] * 5, completions=completions, **columns)
        finally:
            await code.aclose()

    with pytest.warns(UserWarning, match=r"code_reward: 2 of 5 rows could not be scored: "
                      r"row 1: input_output: 1 inputs but 0 outputs"):
        rewards = asyncio.run(run())
    assert rewards == [1.0, None, 1.0, 0.0, None]


def test_unknown_verifier_and_dead_server_fail_loudly(server: ServerProcess) -> None:
    from reward_server.client import RewardServerUnavailable

    with pytest.raises(ValueError, match="no verifier 'chess'"):
        asyncio.run(ServerReward(server.url, verifier="chess")(prompts=["p"],
                                                               completions=["x"]))
    dead = ServerReward(f"http://127.0.0.1:{free_port()}", max_attempts=2, backoff_s=0.01)
    with pytest.raises(RewardServerUnavailable):
        asyncio.run(dead(prompts=["p"], completions=["x"], answer=["1"]))


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                            "ignore::FutureWarning")
def test_trl_grpo_trainer_trains_with_it(server: ServerProcess, tmp_path: Path) -> None:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trainer.models import load_model, prepare_tokenizer

    model, tokenizer = load_model("tiny", torch.float32, 0)
    prepare_tokenizer(tokenizer)
    dataset = Dataset.from_list([{"prompt": f"say 7: {i}", "answer": "7", "source": "toy"}
                                 for i in range(16)])
    reward = ServerReward(server.url, verifier="math", params={"extract": "last_number"})
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=8,
                      num_generations=4, max_completion_length=6, max_steps=2,
                      logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                      bf16=False, seed=0, dataloader_num_workers=0, beta=0.0)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args,
                          train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "rewards/math_reward/mean" in entry]
    assert len(logs) == 2  # both steps were scored by the server, through TRL's async path
    assert all(0.0 <= e["rewards/math_reward/mean"] <= 1.0 for e in logs)
    assert any("math_reward/unscorable_rate" in k for e in trainer.state.log_history
               for k in e)
