"""A tokenizer and a tiny model built in code: a character-level tokenizer under a chat
template, and a 2-layer Llama taught one transcript by heart."""

from __future__ import annotations

import string
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)


def char_tokenizer(chat_template: str | None = None, chars: str | None = None
                   ) -> PreTrainedTokenizerFast:
    """A character-level tokenizer over printable ASCII (the tiny model's has no backtick or
    newline), ``<|im_end|>`` its EOS, as Qwen's; or over ``chars`` alone (``ENGINE_CHARS``:
    the vocabulary of the model the test vLLM engine is built for)."""
    specials = ["<pad>", "<|im_end|>", "<unk>"]
    kept = list(chars) if chars is not None else sorted(set(string.printable) - set("\r\x0b\x0c"))
    core = Tokenizer(models.WordLevel({t: i for i, t in enumerate(specials + kept)}, "<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>",
                                        eos_token="<|im_end|>", unk_token="<unk>")
    tokenizer.chat_template = chat_template or PLAIN_TEMPLATE
    return tokenizer


# 44 characters and the 3 specials: the tiny model's 47 ids (trainer.models.tiny_model), so a
# model taught over them loads into the test session's vLLM engine; enough for fenced calls
ENGINE_CHARS = "\n `()*=>0123456789abcdefghijklmnopqrstuvwxyz"


PLAIN_TEMPLATE = ("{% for m in messages %}{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt %}=>{% endif %}")


HERMES_TEMPLATE = (  # Qwen2.5's, cut to what matters: tools in the system turn, tool results
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>\n{% for t in tools %}"
    "{{ t | tojson }}\n{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ m.content }}\n</tool_response><|im_end|>\n{% elif m.role == 'assistant' %}"
    "<|im_start|>assistant\n{{ m.content }}{% for c in m.tool_calls or [] %}<tool_call>\n"
    "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}"
    "\n</tool_call>{% endfor %}<|im_end|>\n{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}")


def taught(tokenizer: PreTrainedTokenizerBase, prompt: str, policy: list[str],
           tool: list[str], heads: int = 4) -> LlamaForCausalLM:
    """A 2-layer Llama that has learnt one transcript by heart (the policy's turns, between
    the tool's), so that what it samples at a low temperature is that transcript. ``heads=2``
    (and ``ENGINE_CHARS``): the shapes of the test vLLM engine's model."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True))
    ids, learn = tokenizer(prompt, add_special_tokens=False).input_ids, []
    learn = [False] * len(ids)
    for k, turn in enumerate(policy):
        for text, trained in ((turn, True), (tool[k] if k < len(tool) else "", False)):
            piece = tokenizer(text, add_special_tokens=False).input_ids
            ids, learn = ids + piece, learn + [trained] * len(piece)
    x = torch.tensor([ids])
    labels = torch.where(torch.tensor([learn]), x, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(400):
        loss = model(input_ids=x, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.005:
            break
    return model.eval()


def taught_tool_calls(tokenizer: PreTrainedTokenizerBase, prompt: list[dict[str, Any]],
                      tools: list[Any], turns: list[tuple[str, dict[str, Any], str]],
                      answer: str) -> LlamaForCausalLM:
    """A tiny Llama that has learnt a conversation of tool calls (each ``(tool, arguments,
    what it returned)``, then the answer) as the chat template renders it with ``tools``'
    schemas: what TRL will render, so its samples are those calls."""
    messages: list[dict[str, Any]] = list(prompt)
    for name, arguments, output in turns:
        call = {"type": "function", "function": {"name": name, "arguments": arguments}}
        messages += [{"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "name": name, "content": output}]
    messages.append({"role": "assistant", "content": answer})

    def render(upto: int, generation: bool = False) -> str:
        return tokenizer.apply_chat_template(messages[:upto], tools=tools, tokenize=False,
                                             add_generation_prompt=generation)

    full = render(len(messages))
    starts = [len(render(i, True)) for i, m in enumerate(messages) if m["role"] == "assistant"]
    ends = [len(render(i + 1)) - 1 for i, m in enumerate(messages) if m["role"] == "assistant"]
    policy = [full[s:e] for s, e in zip(starts, ends, strict=True)]  # up to <|im_end|>
    tool_turns = [full[e:s] for e, s in zip(ends, starts[1:], strict=False)]
    return taught(tokenizer, full[:starts[0]], policy, tool_turns)
