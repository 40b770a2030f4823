"""Where an engine's tool turn stops (trainer/engine/multiturn.py): the stop ids a request
gets by where its turn stands, the cut of a sample at the first completed call, and the rounds
a rollout with inline code in its prose costs, against a scripted stand-in engine (no vLLM)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from reward_server.tool_client import Round, ToolCall, ToolResult
from tests.helpers.tiny_models import HERMES_TEMPLATE, char_tokenizer
from trainer.engine.client import Sample
from trainer.engine.multiturn import StopIds, generate_with_tools_on_engine
from trainer.multiturn import CallStop, ToolUse, call_cut, closer_ids
from trainer.rollout import Sampling, format_prompt
from trainer.seeds import DrawSeeds
from trainer.tools import FencedFormat, call_format

FENCED = FencedFormat()
# prose with inline code around a call, then the answer after the tool's output
TURN = "Let `x` be `len(s)`, `s` = `'ab'`:\n```python\nprint(len('ab'))\n```"
ANSWER = "So `x` is `2`.<|im_end|>"


def fence_token(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """``tokenizer`` with "```" one token, as BPE vocabularies have it (Qwen's, Llama's)."""
    tokenizer.add_tokens(["```"])
    return tokenizer


@pytest.fixture(params=["chars", "fence token"])
def tokenizer(request: pytest.FixtureRequest) -> PreTrainedTokenizerBase:
    """Every backtick a token of its own, or the fence one token too."""
    tokenizer = char_tokenizer()
    return fence_token(tokenizer) if request.param == "fence token" else tokenizer


def _ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids


def _stops(tokenizer: PreTrainedTokenizerBase, fmt: Any = FENCED) -> StopIds:
    return StopIds.of(tokenizer, fmt, [tokenizer.eos_token_id],
                      closer_ids(tokenizer, fmt))


def test_outside_a_call_a_turn_stops_at_its_eos_and_the_fence_alone() -> None:
    tokenizer = fence_token(char_tokenizer())
    stops = _stops(tokenizer)
    fence, tick, eos = (tokenizer.convert_tokens_to_ids(t) for t in ("```", "`", "<|im_end|>"))
    closers = [eos, *closer_ids(tokenizer, FENCED)]
    assert tick in closers and fence in closers
    for prose in ["", "Let `x` be `len(s)`", "so `", "``", "```bash\nls", "```py thon"]:
        assert stops.for_turn(tokenizer, FENCED, _ids(tokenizer, prose), True) == sorted(
            [eos, fence]), prose
    # inside a call, or where one may be opening: every closer
    for inside in ["```", "````", "```py", "```python", "```python\n", "x ```\nprint(`",
                   "```bash\nls\n```\n"]:  # a fence and a newline open a call, as _FENCE reads
        assert stops.for_turn(tokenizer, FENCED, _ids(tokenizer, inside), True) == sorted(
            set(closers)), inside
    # no call may end the turn (past max_tool_turns): its EOS alone
    assert stops.for_turn(tokenizer, FENCED, _ids(tokenizer, "```python\n"), False) == [eos]


def test_the_template_format_stops_at_its_eos_alone() -> None:
    tokenizer = char_tokenizer(HERMES_TEMPLATE)
    fmt = call_format("template", tokenizer)
    stops = _stops(tokenizer, fmt)
    for text in ["", "```python\nprint(1)\n``", "<tool_call>\n{"]:
        assert stops.for_turn(tokenizer, fmt, _ids(tokenizer, text), True) == [
            tokenizer.eos_token_id]


def _call_stop_at(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> int | None:
    """Where HF's ``CallStop`` ends a row that generates ``ids`` one token at a time."""
    stop = CallStop(tokenizer, FENCED, start=1, armed=[True])
    for k in range(1, len(ids) + 1):
        if stop(torch.tensor([[0, *ids[:k]]]), torch.zeros(1)).all():
            return stop.at[0]
    return None


@pytest.mark.parametrize("text", [
    TURN + "\n```output\n2\n```\n" + ANSWER,
    "no call: `x`, ``` and ```bash\nls\n```",
    "```bash\nls\n```\nthen\n```\n and more",  # a closing fence that opens the next call
    "`",
    "inline ```py\nx\n``` then ```python\ny\n```",
])
def test_the_cut_is_where_call_stop_ends_the_turn(tokenizer, text: str) -> None:
    ids = _ids(tokenizer, text)
    closers = set(closer_ids(tokenizer, FENCED))
    at = call_cut(tokenizer, FENCED, ids, closers)
    assert at == _call_stop_at(tokenizer, ids)
    if at is not None:  # the kept tokens end where the call does
        assert FENCED.call_end(tokenizer.decode(ids[:at])) == len(tokenizer.decode(ids[:at]))


def test_the_cut_asks_only_past_where_it_asked_before() -> None:
    tokenizer = char_tokenizer()
    ids = _ids(tokenizer, "```python\nx\n``` and `y`")
    closers = set(closer_ids(tokenizer, FENCED))
    at = call_cut(tokenizer, FENCED, ids, closers)
    assert at == len(_ids(tokenizer, "```python\nx\n```"))
    assert call_cut(tokenizer, FENCED, ids[:at - 1], closers) is None
    assert call_cut(tokenizer, FENCED, ids, closers, start=at - 1) == at


class _Tool:
    """The code tool at the edge: every call prints 2."""

    def __init__(self) -> None:
        self.calls: list[str | None] = []

    def run(self, calls: list[tuple[int, ToolCall]]) -> Round:
        self.calls += [call.code for _, call in calls]
        return Round([ToolResult("2") for _ in calls], 0.0)

    def close_sessions(self) -> None:
        pass


class _Scripted:
    """A stand-in engine whose policy writes one transcript: from the prompt and any prefix
    of ``transcript``, the next token is the transcript's next (log-prob -(its place)/100),
    up to a prompt's stop ids (one list for all, or one per prompt) or its token limit."""

    def __init__(self, prompt: list[int], transcript: list[int]) -> None:
        self.prompt, self.transcript = prompt, transcript
        self.requests: list[list[list[int]]] = []

    def generate(self, prompts: list[list[int]], n: int, max_tokens: list[int],
                 stop_token_ids: list[int] | list[list[int]], **_: Any) -> list[list[Sample]]:
        self.requests.append(prompts)
        each = bool(stop_token_ids) and isinstance(stop_token_ids[0], list)
        stops = stop_token_ids if each else [stop_token_ids] * len(prompts)
        out = []
        for context, limit, stop in zip(prompts, max_tokens, stops, strict=True):
            done = len(context) - len(self.prompt)
            assert context == self.prompt + self.transcript[:done]  # the same sequence
            drawn: list[int] = []
            for token in self.transcript[done:]:
                drawn.append(token)
                if token in stop or len(drawn) == limit:
                    break
            reason = "stop" if drawn[-1] in stop else "length"
            logps = [-(done + i + 1) / 100 for i in range(len(drawn))]
            out.append([Sample(drawn, logps, reason) for _ in range(n)])
        return out


def _rollout(tokenizer: PreTrainedTokenizerBase) -> tuple[Any, _Scripted, _Tool, list[int]]:
    """Two rollouts of the scripted policy, and the transcript they should be."""
    tool = _Tool()
    use = ToolUse(tool, FENCED, max_turns=2)  # type: ignore[arg-type]
    rows = [{"prompt": "q"}]
    prompts = [format_prompt(r, tokenizer, "prompt", None, True) for r in rows]
    prompt = _ids(tokenizer, "q=>")
    output = FENCED.output_ids(tokenizer, "2")
    transcript = _ids(tokenizer, TURN) + output + _ids(tokenizer, ANSWER)
    engine = _Scripted(prompt, transcript)
    rollout = generate_with_tools_on_engine(
        engine, tokenizer, rows, prompts, Sampling(2, 64, 200), use,  # type: ignore[arg-type]
        [tokenizer.eos_token_id], seeds=DrawSeeds(0, 0, 0))
    return rollout, engine, tool, transcript


@pytest.mark.parametrize(("vocabulary", "rounds"), [("chars", 2), ("fence token", 3)])
def test_inline_code_costs_no_rounds(vocabulary: str, rounds: int) -> None:
    """Two turns, eight inline backticks: one round per turn where the vocabulary has no
    fence token (the call is found in what was drawn, and cut there); with one, a stop at the
    opening fence and one at the closing fence."""
    tokenizer = char_tokenizer()
    if vocabulary == "fence token":
        fence_token(tokenizer)
    rollout, engine, tool, transcript = _rollout(tokenizer)
    assert len(engine.requests) == rounds
    assert tool.calls == ["print(len('ab'))", "print(len('ab'))"]
    turn, output = len(_ids(tokenizer, TURN)), len(FENCED.output_ids(tokenizer, "2"))
    for row in range(2):
        assert rollout.completion_ids[row].tolist() == transcript
        assert rollout.tool_mask[row].tolist() == [1] * turn + [0] * output + [1] * (
            len(transcript) - turn - output)
        policy = rollout.tool_mask[row].bool()
        places = torch.arange(1, len(transcript) + 1) / -100
        torch.testing.assert_close(rollout.engine_logps[row][policy], places[policy])
        assert (rollout.engine_logps[row][~policy] == 0).all()
    assert not rollout.truncated.any()
    assert rollout.tool_stats.tolist() == [[1, 0, 0, 0]] * 2


def test_the_engine_takes_one_stop_list_for_all_prompts_or_one_per_prompt() -> None:
    """The engine process's reading of a request (no vLLM needed to read it): a list of
    lists is one per prompt, and a count that is not the prompts' is refused, not zipped
    short."""
    from trainer.engine.vllm_process import _per_prompt

    prompts = [[1], [2]]
    assert _per_prompt([5, 6], False, prompts, "stop_token_ids") == [[5, 6], [5, 6]]
    assert _per_prompt([[5], [6, 7]], True, prompts, "stop_token_ids") == [[5], [6, 7]]
    with pytest.raises(ValueError, match="stop_token_ids: 1 values for 2 prompts"):
        _per_prompt([[5]], True, prompts, "stop_token_ids")
