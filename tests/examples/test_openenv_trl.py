"""The TRL example (examples/openenv_trl.py) trained two steps through the server's OpenEnv
environments, against the real server and sandbox. A tiny model taught one transcript by
heart runs ``print(6*7)`` with ``run_python`` and submits 42; TRL parses the calls and runs
the example's tools, which step OpenEnv clients: the tool message 42 is what the episode's
interpreter printed (the model never writes a tool turn), and the reward TRL logs is the
math verifier's score of the submission."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reward_server.testing import ServerProcess
from tests.conftest import ROOT
from tests.helpers.environments import sessions_of
from tests.helpers.waiting import eventually

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                                        "ignore::FutureWarning")


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "openenv_trl", ROOT / "examples" / "openenv_trl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cells(url: str) -> float:
    """Session cells run to their end so far, as the server counts them."""
    text = httpx.get(f"{url}/metrics", timeout=60).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "reward_session_cells_total" and s.labels.get("status") == "Finished")


def test_the_example_trains_through_the_environments(sandbox_url: str, server: ServerProcess,
                                                     tmp_path: Path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig
    from trl.chat_template_utils import qwen2_5_chat_template

    from tests.helpers.tiny_models import char_tokenizer, taught_tool_calls

    openenv_trl = example()
    rows = openenv_trl.dataset(limit=1).to_list()
    prompt = [{**m, "content": "What is 6 * 7?"} if m["role"] == "user" else m
              for m in rows[0]["prompt"]]
    envs = openenv_trl.MultiplyEnvs(sandbox_url)
    tokenizer = char_tokenizer(qwen2_5_chat_template)  # TRL knows how to parse its tool calls
    probe = openenv_trl.MultiplyEnv(sandbox_url)
    model = taught_tool_calls(
        tokenizer, prompt, [probe.run_python, probe.submit_answer],
        [("run_python", {"code": "print(6*7)"}, "42"),
         ("submit_answer", {"answer": "42"}, "Submitted.")], "42")
    probe._close()
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=512, max_steps=2,
                      temperature=0.01, max_tool_calling_iterations=3, logging_steps=1,
                      report_to=[], save_strategy="no", use_cpu=True, bf16=False, seed=0,
                      dataloader_num_workers=0, beta=0.0, log_completions=False)
    data = Dataset.from_list([{"prompt": prompt, "answer": "42"}] * 4)
    before = _cells(sandbox_url)
    try:
        trainer = openenv_trl.trainer(model, tokenizer, envs, data, args)
        trainer.train()
        rewards = [e["reward"] for e in trainer.state.log_history if "reward" in e]
        assert rewards == [1.0, 1.0], trainer.state.log_history  # every rollout submitted 42
        assert all(env.submitted for env in envs.made)
        assert _cells(sandbox_url) - before == 4  # one print(6*7) per rollout, in a session
        # each rollout's interpreter is its own session, closed at its next reset
        assert len(sessions_of(server)) <= len(envs.made)
    finally:
        envs.close()
    eventually(lambda: sessions_of(server) == [], 60, "every rollout's interpreter closed")

