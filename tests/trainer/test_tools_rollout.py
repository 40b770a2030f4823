"""Rollouts that call the code tool (trainer/multiturn.py), on a tiny model built in code and
taught one tool-using transcript, against the real server's sandbox: the turns, the masks,
the update's view of them (no gradient through a tool's tokens; the policy's log-probs those
of one forward over the whole sequence), and a trainer step with the tool on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from reward_server.tool_client import CodeTool
from tests.helpers.tiny_models import HERMES_TEMPLATE, char_tokenizer, taught
from tests.helpers.tool_rollouts import ANSWER, CALL, OUTPUT, segments
from trainer.config import GRPOConfig
from trainer.logprobs import completion_logps
from trainer.loss import policy_loss
from trainer.multiturn import ToolUse, generate_with_tools
from trainer.rewards import FunctionScorer
from trainer.rollout import Rollout, Sampling, format_prompt
from trainer.tools import call_format
from trainer.train import GRPOTrainer

TEMPLATE_CALL = ('<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n'
                 '</tool_call><|im_end|>')
TEMPLATE_OUTPUT = ("\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
                   "<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def fenced() -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    tokenizer = char_tokenizer()
    return taught(tokenizer, "q=>", [CALL, ANSWER], [OUTPUT]), tokenizer


def _rollout(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase, url: str,
             max_completion_length: int = 120, G: int = 2, **tool: Any) -> Rollout:
    use = ToolUse(CodeTool(url, **tool), call_format("auto", tokenizer), max_turns=2)
    rows = [{"prompt": "q"}]
    prompts = [format_prompt(r, tokenizer, "prompt", None, True, tools=use.format.tools())
               for r in rows]
    try:
        # a low temperature: the taught transcript, through the sampling path (G samples of
        # a prompt sharing its prefill)
        return generate_with_tools(model, tokenizer, rows, prompts,
                                   Sampling(G, 512, max_completion_length, temperature=0.01),
                                   use)
    finally:
        use.tool.close()


def test_fenced_rollout_runs_the_call_and_goes_on(fenced, sandbox_url: str) -> None:
    model, tokenizer = fenced
    rollout = _rollout(model, tokenizer, sandbox_url)
    for row in range(2):
        assert segments(rollout, tokenizer, row) == [CALL, OUTPUT, ANSWER]
        assert rollout.texts[row] == CALL + OUTPUT + "42"  # the verifier reads it all
    assert rollout.tool_stats.tolist() == [[1, 0, 0, 0], [1, 0, 0, 0]]
    assert not rollout.truncated.any() and rollout.tool_seconds > 0


def test_a_tool_turn_that_does_not_fit_ends_the_rollout(fenced, sandbox_url: str) -> None:
    model, tokenizer = fenced
    room = len(tokenizer(CALL).input_ids) + 5  # the call fits, its output does not
    rollout = _rollout(model, tokenizer, sandbox_url, max_completion_length=room)
    assert segments(rollout, tokenizer, 0) == [CALL]
    assert rollout.tool_stats[0, 0] == 1 and rollout.truncated.all()
    assert rollout.completion_mask.sum(1).max() <= room


def test_an_unreachable_sandbox_is_text_in_the_rollout(fenced) -> None:
    model, tokenizer = fenced
    rollout = _rollout(model, tokenizer, "http://127.0.0.1:9", max_completion_length=300,
                       request_timeout_s=2)
    policy, tool, *_ = segments(rollout, tokenizer, 0)
    assert policy == CALL and "Error: the code tool is unavailable" in tool
    assert rollout.tool_stats[:, 1].tolist() == [1, 1]  # failed calls, counted
    assert rollout.tool_stats[:, 3].tolist() == [1, 1]  # outages: these rollouts score null


class _Sessions:
    """``/v1/sessions`` at the network edge: session ``s<k>`` for the k-th opened; ``s0``'s
    cells print more than a rollout has room for, every other's ``42``."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/sessions":
            session = f"s{len(self.runs)}"
            self.runs[session] = 0
            return httpx.Response(200, json={"session_id": session})
        session = request.url.path.split("/")[3]
        if request.method == "DELETE":
            return httpx.Response(204)
        self.runs[session] += 1
        out = "x" * 200 if session == "s0" else "42"
        return httpx.Response(200, json={"status": "Success", "cells": [
            {"status": "Finished", "stdout": out + "\n", "display": [], "error": []}]})


def test_a_session_belongs_to_one_rollout() -> None:
    """Rollout 0's output does not fit, so it ends; rollout 1 makes its second call, which
    must reach its own session, not the one of the rollout that ended."""
    tokenizer = char_tokenizer()
    model = taught(tokenizer, "q=>", [CALL, CALL, ANSWER], [OUTPUT, OUTPUT])
    sessions = _Sessions()
    rollout = _rollout(model, tokenizer, "http://rs", state="session", concurrency=1,
                       transport=httpx.MockTransport(sessions))
    assert rollout.tool_stats[:, 0].tolist() == [1, 2]
    assert sessions.runs == {"s0": 1, "s1": 2}


def test_template_rollout_uses_the_templates_tool_turns(sandbox_url: str) -> None:
    tokenizer = char_tokenizer(HERMES_TEMPLATE)
    use_format = call_format("auto", tokenizer)
    prompt = format_prompt({"prompt": "q"}, tokenizer, "prompt", None, True,
                           tools=use_format.tools()).text
    assert '"name": "python"' in prompt  # the schema is in the prompt
    model = taught(tokenizer, prompt, [TEMPLATE_CALL, ANSWER], [TEMPLATE_OUTPUT])
    rollout = _rollout(model, tokenizer, sandbox_url, max_completion_length=200)
    assert segments(rollout, tokenizer, 0) == [TEMPLATE_CALL, TEMPLATE_OUTPUT, ANSWER]
    assert rollout.tool_stats[0].tolist() == [1, 0, 0, 0] and not rollout.truncated.any()


def test_tool_tokens_have_no_gradient_and_policy_logps_are_one_forwards(
        fenced, sandbox_url: str) -> None:
    model, tokenizer = fenced
    rollout = _rollout(model, tokenizer, sandbox_url)
    model.train()  # the update's mode (no dropout in this model)
    ids = torch.cat([rollout.prompt_ids, rollout.completion_ids], 1)
    attn = torch.cat([rollout.prompt_mask, rollout.completion_mask], 1)
    T = rollout.completion_ids.shape[1]
    logps = completion_logps(model, ids, attn, T, 1.0, prompt_model=model)  # (N, T)
    logps.retain_grad()
    mask = rollout.completion_mask * rollout.tool_mask  # as training_step builds it
    loss, _ = policy_loss(logps, None, logps.detach() + 0.5, torch.tensor([1.0, -1.0]), mask,
                          loss_type="dapo", beta=0.1)
    loss.backward()
    tool = (rollout.completion_mask == 1) & (rollout.tool_mask == 0)
    assert tool.sum() == 2 * len(tokenizer(OUTPUT).input_ids)
    assert (logps.grad[tool] == 0).all()  # neither the clipped term nor the KL
    assert (logps.grad[mask.bool()] != 0).all()
    for row in range(2):  # the same tokens, one sequence, no padding, no shared prompt
        seq = ids[row][attn[row].bool()]
        with torch.no_grad():
            full = torch.log_softmax(model(seq[None]).logits[0, :-1].float(), -1)
        n = int(rollout.completion_mask[row].sum())
        single = full[-n:].gather(-1, seq[-n:, None]).squeeze(-1)
        torch.testing.assert_close(logps[row, :n].detach(), single, atol=1e-5, rtol=1e-5)


def test_a_training_step_with_the_tool(fenced, sandbox_url: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokenizer = fenced
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path), max_steps=1,
                        prompts_per_step=2, num_generations=2, max_completion_length=80,
                        temperature=0.5, learning_rate=1e-4, progress_bar=False, beta=0.05,
                        code_tool=True, tool_url=sandbox_url, max_tool_turns=1)
    scorer = FunctionScorer(lambda texts, rows: [float(t.endswith("42")) for t in texts])
    trainer = GRPOTrainer(model, tokenizer, [{"prompt": "q"}] * 4, config, None,
                          eval_rows=[{"prompt": "q"}], scorer=scorer)
    masks: list[torch.Tensor] = []
    real = policy_loss

    def spy(*args: Any, **kwargs: Any) -> Any:
        masks.append(args[4])
        return real(*args, **kwargs)

    monkeypatch.setattr("trainer.train.policy_loss", spy)
    metrics = trainer.training_step()
    assert metrics["tools/call_frequency"] > 0 and metrics["time/tools"] > 0
    assert metrics["tools/failure_frequency"] == 0.0
    assert 0 < metrics["tools/output_token_fraction"] < 1
    # the loss saw no tool token: what was masked is exactly the tool's share
    kept = sum(float(m.sum()) for m in masks)
    assert kept < metrics["completion_length"] * 4
    assert trainer.evaluate()["eval/accuracy"] == 1.0  # greedy, with the tool
    trainer.tool_use.tool.close()
