"""The sandbox as a tool inside TRL's own GRPOTrainer: ``tools=[sandbox_tool(url)]`` and
``environment_factory=SandboxSessions(url)``, trained a couple of steps against the real
server and sandbox. A tiny model taught one transcript by heart writes the tool calls; TRL
parses them, calls our tool in its ``_tool_call_loop`` and appends the result: a tool
message holding 42 is what the sandbox printed, since the model never writes a tool turn."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reward_server.adapters.trl_tools import SandboxSessions, sandbox_tool

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                                        "ignore::FutureWarning")
PROMPT = [{"role": "user", "content": "q"}]


def _taught(tokenizer: Any, tool: Any, turns: list[tuple[str, str]], answer: str) -> Any:
    """A tiny Llama that has learnt the conversation (each call, the tool's output, the
    answer) as the template renders it with ``tool``'s schema, the one TRL will render."""
    from tests.helpers.tiny_models import taught_tool_calls

    return taught_tool_calls(tokenizer, PROMPT, [tool],
                             [("run_python", {"code": code}, out) for code, out in turns], answer)


def _train(model: Any, tokenizer: Any, tmp_path: Path, url: str,
           **tooling: Any) -> tuple[list[Any], list[int]]:
    """Two GRPO steps of 2 rollouts: the (completion, environment) pairs TRL scored, the
    completions with their tool turns, and how many sessions were open as each was scored."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    seen: list[Any] = []
    open_sessions: list[int] = []

    def record(completions: list[Any], **kwargs: Any) -> list[float]:
        seen.extend(zip(completions, kwargs.get("environments") or [None] * len(completions),
                        strict=True))
        open_sessions.append(len(httpx.get(f"{url}/v1/sessions", timeout=60).json()))
        return [0.0] * len(completions)

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=512, max_steps=2,
                      temperature=0.01, max_tool_calling_iterations=3, logging_steps=1,
                      report_to=[], save_strategy="no", use_cpu=True, bf16=False, seed=0,
                      dataloader_num_workers=0, beta=0.0)
    trainer = GRPOTrainer(model=model, reward_funcs=[record], args=args,
                          train_dataset=Dataset.from_list([{"prompt": PROMPT}] * 4),
                          processing_class=tokenizer, **tooling)
    trainer.train()
    return seen, open_sessions


def _tool_outputs(completion: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in completion if m["role"] == "tool"]


def _run_code_calls(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=60).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "reward_requests_total" and s.labels.get("route") == "/run_code")


def _tokenizer() -> Any:
    from trl.chat_template_utils import qwen2_5_chat_template

    from tests.helpers.tiny_models import char_tokenizer

    return char_tokenizer(qwen2_5_chat_template)  # TRL knows how to parse its tool calls


def test_a_stateless_tool_runs_in_trls_loop(sandbox_url: str, tmp_path: Path) -> None:
    tool = sandbox_tool(sandbox_url)
    tokenizer = _tokenizer()
    model = _taught(tokenizer, tool, [("print(6*7)", "42")], "42")
    before = _run_code_calls(sandbox_url)
    try:
        seen, open_sessions = _train(model, tokenizer, tmp_path, sandbox_url, tools=[tool])
    finally:
        tool.close()  # type: ignore[attr-defined]
    assert len(seen) == 4
    assert all(_tool_outputs(c) == ["42"] for c, _ in seen), seen
    assert _run_code_calls(sandbox_url) - before == 4  # one POST /run_code per rollout
    assert open_sessions == [0, 0]


def test_a_session_keeps_variables_within_a_rollout_and_closes(sandbox_url: str,
                                                               tmp_path: Path) -> None:
    sessions = SandboxSessions(sandbox_url)
    tokenizer = _tokenizer()
    model = _taught(tokenizer, sessions().run_python,
                    [("x = 6*7", ""), ("print(x)", "42")], "42")
    try:
        seen, open_sessions = _train(model, tokenizer, tmp_path, sandbox_url,
                                     environment_factory=sessions,
                                     callbacks=[sessions.callback()])
        assert len(seen) == 4
        # each rollout of a batch holds its own session while scored; the first batch's were
        # closed at the second's resets (no more than 2 open at once)
        assert open_sessions == [2, 2]
        # x survived from the first call to the second, in each rollout's own interpreter
        assert all(_tool_outputs(c) == ["", "42"] for c, _ in seen), seen
        assert all(env.calls == 2 for _, env in seen)
        assert httpx.get(f"{sandbox_url}/v1/sessions", timeout=60).json() == []  # closed at train end
        # a fresh rollout of a reused instance starts from a fresh interpreter
        env = seen[0][1]
        env.reset()
        assert "NameError: name 'x' is not defined" in env.run_python("print(x)")
    finally:
        sessions.close()
    assert httpx.get(f"{sandbox_url}/v1/sessions", timeout=60).json() == []


def test_an_unreachable_server_is_the_tools_text_not_an_exception() -> None:
    from tests.conftest import free_port

    url = f"http://127.0.0.1:{free_port()}"
    tool, sessions = sandbox_tool(url, request_timeout_s=2), SandboxSessions(url)
    try:
        for run in (tool, sessions().run_python):
            assert run("print(1)").startswith("Error: the code tool is unavailable (Connect")
    finally:
        tool.close()  # type: ignore[attr-defined]
        sessions.close()


def test_past_the_per_caller_cap_a_call_reads_the_servers_429(sandbox_url: str) -> None:
    sessions = SandboxSessions(sandbox_url)
    try:
        held = [sessions() for _ in range(4)]  # the server's sandbox_session_max_per_caller
        assert [env.run_python("1 + 1") for env in held] == ["2"] * 4
        refused = sessions()
        assert "HTTP 429" in refused.run_python("1 + 1")
        assert refused.outages == 1 and all(env.outages == 0 for env in held)
        held[0].reset()  # frees its session: the next rollout gets one
        assert sessions().run_python("1 + 1") == "2"
    finally:
        sessions.close()
    assert httpx.get(f"{sandbox_url}/v1/sessions", timeout=60).json() == []
