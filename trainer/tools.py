"""The code tool of multi-turn rollouts: how a policy writes a call (two formats), and the
client that runs one turn's calls in the reward server's sandbox, all together.

Formats (``tool_format``):

- ``fenced``: ToRL's and SimpleTIR's convention for models without a tool-call format. The
  policy writes a ```` ```python ```` block; generation stops at its closing fence
  (SimpleTIR's pattern, ``agent_utils.py``); the output comes back as an ```` ```output ````
  block (ToRL, arXiv 2503.23383, fig. 1), and the policy goes on.
- ``template``: the chat template's own format, Qwen2.5's and Hermes' ``<tool_call>{"name":
  "python", "arguments": {"code": ...}}</tool_call>``; the turn ends at the template's end of
  turn, and the result is a ``tool`` message rendered by the template, as TRL's
  ``_tool_call_loop`` does (``_get_tool_suffix_ids``).

The client that runs the calls and the text a policy reads back are the reward server's
(``reward_server.tool_client``: TRL's tools use it too). A call the sandbox could not run is an
error text in the conversation, never an exception out of the step: the rollout goes on, and
the step's metrics count it (``tools/failure_frequency``; ``tools/outage_frequency`` for the
ones the policy did not cause, whose rollouts score null).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, Protocol

from transformers import PreTrainedTokenizerBase

from reward_server.tool_client import ToolCall

TOOL_NAME = "python"
# The schema a template renders into the system prompt (apply_chat_template(tools=...)).
PYTHON_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run a Python 3 program in a sandbox and return what it prints "
                       "(stdout, and the last line of an error).",
        "parameters": {"type": "object", "required": ["code"], "properties": {
            "code": {"type": "string", "description": "The program; print what you need."}}},
    },
}


# --- formats ------------------------------------------------------------------------------


class CallFormat(Protocol):
    name: str
    # a character every token that can complete a call holds (the closing fence's backtick):
    # a turn stops at such a token and asks call_end; None: a call ends at an EOS
    closer: str | None
    # the text a token holds that can open a call by itself (a fence's three backticks): an
    # engine's turn outside a call stops only at those; None with ``closer``
    opener: str | None

    def tools(self) -> list[dict[str, Any]] | None:
        """The schemas the prompt's template renders (None: the prompt has none)."""

    def call_end(self, text: str) -> int | None:
        """Where a complete call ends in a turn's text, if the turn must stop there."""

    def call_open(self, text: str) -> bool:
        """Whether a turn's text (no complete call in it) stands inside a call, or at what
        may be the start of one: what follows may complete a call at any closer."""

    def parse(self, text: str) -> ToolCall | None:
        """The call in a finished turn's text; None: the turn made none."""

    def output_ids(self, tokenizer: PreTrainedTokenizerBase, result: str) -> list[int]:
        """The tokens of the tool's turn, which the policy reads and is not trained on."""


_FENCE = re.compile(r"```(?:py|python)?\n(.*?)\n```", re.DOTALL)  # SimpleTIR's pattern
# _FENCE's opening (anywhere: what follows it up to a "\n```" is a call), or a text ending
# where one may be under way ("```", "```py"). Not one or two backticks at the end: after a
# stop at an inline backtick, that would stop at every one after it (where a fence is split
# so, "`" then "``python", the call is found in what was drawn)
_OPENING = re.compile(r"```(?:py|python)?\n|```(?:p|py|pyt|pyth|pytho|python)?\Z")


class FencedFormat:
    """```` ```python ... ``` ```` then ```` ```output ... ``` ```` (ToRL, SimpleTIR)."""

    name = "fenced"
    closer = "`"
    opener = "```"

    def tools(self) -> None:
        return None

    def call_end(self, text: str) -> int | None:
        match = _FENCE.search(text)
        return match.end() if match else None

    def call_open(self, text: str) -> bool:
        return _OPENING.search(text) is not None

    def parse(self, text: str) -> ToolCall | None:
        match = _FENCE.search(text)
        return ToolCall(match.group(1)) if match else None

    def output_ids(self, tokenizer: PreTrainedTokenizerBase, result: str) -> list[int]:
        return as_text_ids(tokenizer, f"\n```output\n{result}\n```\n")  # no specials of its own


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class TemplateFormat:
    """The chat template's ``<tool_call>`` JSON and ``tool`` role (Qwen2.5, Hermes)."""

    name = "template"
    closer = None
    opener = None

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        if not supports_tools(tokenizer):
            raise ValueError("tool_format 'template': the tokenizer's chat template renders "
                             "no tools; use tool_format 'fenced'")
        self._suffix_head: list[int] | None = None
        self._tokenizer = tokenizer

    def tools(self) -> list[dict[str, Any]]:
        return [PYTHON_TOOL]

    def call_end(self, text: str) -> None:
        return None  # the turn ends at the template's end of turn (an EOS id)

    def call_open(self, text: str) -> bool:
        return False

    def parse(self, text: str) -> ToolCall | None:
        match = _TOOL_CALL.search(text)
        if match is None:
            return None
        try:
            call = json.loads(match.group(1))
        except json.JSONDecodeError as exc:
            return ToolCall(None, f"the tool call is not valid JSON ({exc.msg})")
        except RecursionError:  # a thousand '[': the policy's text, so a verdict, not a crash
            return ToolCall(None, "the tool call is not valid JSON (nested too deeply)")
        if not isinstance(call, dict) or call.get("name") != TOOL_NAME:
            name = call.get("name") if isinstance(call, dict) else None
            return ToolCall(None, f"no tool named {name!r}; the tool is {TOOL_NAME!r}")
        arguments = call.get("arguments")
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except (json.JSONDecodeError, RecursionError):
                arguments = None
        code = arguments.get("code") if isinstance(arguments, dict) else None
        if not isinstance(code, str):
            return ToolCall(None, "the call needs arguments {\"code\": \"...\"}")
        return ToolCall(code)

    def output_ids(self, tokenizer: PreTrainedTokenizerBase, result: str) -> list[int]:
        """The template's tokens after an assistant turn that called a tool: the tool message
        and the next assistant header. Rendered as TRL renders them: a conversation with and
        without the message, the difference taken after the first one's last EOS."""
        call = {"type": "function", "function": {"name": TOOL_NAME, "arguments": {}}}
        head = [{"role": "user", "content": "x"},
                {"role": "assistant", "content": "", "tool_calls": [call]}]
        message = {"role": "tool", "name": TOOL_NAME, "content": _SLOT}
        prefix = _ids(tokenizer.apply_chat_template(head, tokenize=True, tools=self.tools()))
        rendered = tokenizer.apply_chat_template(head + [message], tokenize=False,
                                                 add_generation_prompt=True,
                                                 tools=self.tools())
        before, _, after = str(rendered).partition(_SLOT)
        full = (tokenizer(before, add_special_tokens=False).input_ids
                + as_text_ids(tokenizer, result)
                + tokenizer(after, add_special_tokens=False).input_ids)
        eos = [i for i, t in enumerate(prefix) if t == tokenizer.eos_token_id]
        if eos:  # "...<|im_end|>\n": the policy's turn ended at the EOS, not after the newline
            prefix = prefix[: eos[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template renders a tool message that does not extend "
                             "the conversation before it")
        return full[len(prefix):]


_SLOT = "\x00tool output\x00"  # where the output goes in the rendered template


def as_text_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """``text`` as plain text: what a program prints cannot become a control token (a
    printed '<|im_end|><|im_start|>user' would otherwise end the tool's turn and forge the
    next one in the policy's context)."""
    return tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids


def _ids(encoded: Any) -> list[int]:
    """apply_chat_template's ids, whether it returns a list or a BatchEncoding."""
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def supports_tools(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the chat template renders a ``tools`` list (Qwen2.5, Hermes, Llama 3.1 do;
    SmolLM2's and the tiny model's do not)."""
    template = tokenizer.chat_template
    return isinstance(template, str) and "tools" in template


def call_format(name: Literal["auto", "template", "fenced"],
                tokenizer: PreTrainedTokenizerBase) -> CallFormat:
    """``auto``: the template's own format where it has one, else the fenced convention."""
    if name == "template" or (name == "auto" and supports_tools(tokenizer)):
        return TemplateFormat(tokenizer)
    return FencedFormat()
