"""Sampling: draws from π/T with exactly the configured settings, every EOS id stops and
masks, long prompts keep their end (the assistant header)."""

from __future__ import annotations

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from trainer.models import (
    TINY_CHARS,
    TINY_CHAT_TEMPLATE,
    prepare_tokenizer,
    tiny_model,
    tiny_tokenizer,
)
from trainer.rollout import (
    Prompt,
    Sampling,
    completion_mask,
    encode_prompts,
    eos_token_ids,
    format_prompt,
    generate,
)

PROMPT = "say 7: abc"


def peaked_model() -> tuple[torch.nn.Module, object]:
    """The tiny model with its (tied) embeddings scaled: a peaked next-token distribution, on
    which every sampling knob visibly changes the draws."""
    tokenizer = prepare_tokenizer(tiny_tokenizer())
    model = tiny_model(tokenizer, seed=3)
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(2)
    return model.eval(), tokenizer


def first_token_frequencies(model, tokenizer, sampling: Sampling) -> torch.Tensor:
    torch.manual_seed(0)
    rollout = generate(model, tokenizer, [{}], [format_prompt({"p": PROMPT}, tokenizer, "p",
                                                              None, True)], sampling)
    counts = torch.bincount(rollout.completion_ids[:, 0], minlength=len(tokenizer))
    return counts.double() / counts.sum()


def target_distribution(model, tokenizer, temperature: float, top_k: int = 0) -> torch.Tensor:
    text = format_prompt({"p": PROMPT}, tokenizer, "p", None, True).text
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1].double() / temperature
    if top_k:
        logits[logits < logits.topk(top_k).values[-1]] = -torch.inf
    return torch.softmax(logits, -1)


@pytest.mark.parametrize(("top_k", "tolerance"), [(0, 0.08), (3, 0.03)])
def test_samples_follow_pi_over_t_whatever_the_models_generation_config(top_k: int,
                                                                        tolerance: float) -> None:
    model, tokenizer = peaked_model()
    # what a checkpoint's generation_config may carry; none of it may shape the samples
    g = model.generation_config
    g.repetition_penalty, g.min_p, g.top_k, g.top_p, g.typical_p = 1.3, 0.2, 2, 0.5, 0.5
    g.no_repeat_ngram_size, g.min_new_tokens = 1, 1
    sampling = Sampling(num_generations=3000, max_prompt_length=64, max_completion_length=1,
                        temperature=0.9, top_k=top_k)
    seen = first_token_frequencies(model, tokenizer, sampling)
    expected = target_distribution(model, tokenizer, 0.9, top_k)
    assert 0.1 < expected.max() < 0.9  # neither uniform nor one token
    total_variation = 0.5 * (seen - expected).abs().sum()
    # sampling noise: ~0.04 over 47 tokens, ~0.01 over 3; what the model's config would do
    # here (min_p, top_p, typical_p): ~0.7 and ~0.15
    assert total_variation < tolerance, float(total_variation)


def test_eos_ids_merge_tokenizer_and_generation_config() -> None:
    model, tokenizer = peaked_model()
    digits = tokenizer.convert_tokens_to_ids(list("0123"))
    model.generation_config.eos_token_id = [digits[0], tokenizer.eos_token_id, *digits[1:]]
    assert eos_token_ids(model, tokenizer) == [tokenizer.eos_token_id, *digits]
    model.generation_config.eos_token_id = None
    assert eos_token_ids(model, tokenizer) == [tokenizer.eos_token_id]


def test_completion_mask_stops_at_any_eos_id() -> None:
    ids = torch.tensor([[5, 9, 7, 9], [5, 5, 5, 5], [8, 2, 9, 9]])
    mask, truncated = completion_mask(ids, [9, 8])
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]


def test_every_eos_id_of_the_generation_config_stops_generation() -> None:
    tokenizer = prepare_tokenizer(tiny_tokenizer())
    model = tiny_model(tokenizer, seed=1).eval()
    stops = tokenizer.convert_tokens_to_ids(list("0123456789"))  # like Llama 3's <|eot_id|>
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, *stops]
    torch.manual_seed(0)
    sampling = Sampling(num_generations=64, max_prompt_length=64, max_completion_length=24)
    rollout = generate(model, tokenizer, [{}], [Prompt(PROMPT + "=>", templated=True)],
                       sampling)
    ends = torch.isin(rollout.completion_ids, torch.tensor([tokenizer.eos_token_id, *stops]))
    for row, end, mask, truncated in zip(rollout.completion_ids, ends, rollout.completion_mask,
                                         rollout.truncated, strict=True):
        n = int(mask.sum())
        assert not end[: n - 1].any()  # the first end token closes the mask
        assert bool(end[n - 1]) != bool(truncated)
        assert (row[n:] == tokenizer.pad_token_id).all()  # nothing after the stop
    last = rollout.completion_ids.gather(1, rollout.completion_mask.sum(1, keepdim=True) - 1)
    stopped_at_digit = torch.isin(last, torch.tensor(stops)).sum()
    assert stopped_at_digit > 10 and (~rollout.truncated).sum() > 48
    assert all(sum(ch.isdigit() for ch in text) <= 1 for text in rollout.texts)


def test_long_prompts_lose_their_start_not_the_assistant_header() -> None:
    tokenizer = prepare_tokenizer(tiny_tokenizer())
    long = format_prompt({"p": "x" * 40 + " what is 2+3?"}, tokenizer, "p", None, True)
    short = format_prompt({"p": "hi"}, tokenizer, "p", None, True)
    assert long.text.endswith("=>")  # the tiny chat template's assistant header
    ids, mask, cut = encode_prompts(tokenizer, [long, short], max_prompt_length=10)
    assert ids.shape == (2, 10) and cut.tolist() == [True, False]
    full = tokenizer(long.text, add_special_tokens=False).input_ids
    header = tokenizer("=>", add_special_tokens=False).input_ids
    assert ids[0].tolist() == full[-10:] and ids[0, -len(header):].tolist() == header
    n = len(tokenizer(short.text, add_special_tokens=False).input_ids)
    assert ids[1, -n:].tolist() == tokenizer(short.text, add_special_tokens=False).input_ids
    assert mask[1].tolist() == [0] * (10 - n) + [1] * n  # left padding


def bos_tokenizer(kind: str) -> PreTrainedTokenizerBase:
    """The tiny character tokenizer, adding a BOS as Llama 3's does (a post-processor
    template) or as Llama 2's and Mistral's do (``add_bos_token``), with a chat template that
    writes the BOS itself, as theirs do."""
    from tokenizers import processors
    from transformers import LlamaTokenizerFast

    if kind == "add_bos_token":
        vocab = {tok: i for i, tok in enumerate(["<pad>", "<eos>", "<bos>", "<unk>", *TINY_CHARS])}
        tokenizer = LlamaTokenizerFast(vocab=vocab, merges=[], bos_token="<bos>",
                                       eos_token="<eos>", unk_token="<unk>", pad_token="<pad>",
                                       add_bos_token=True)
    else:
        tokenizer = tiny_tokenizer()
        tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A <bos> $B",
            special_tokens=[("<bos>", tokenizer.bos_token_id)])
    tokenizer.chat_template = "{{ bos_token }}" + TINY_CHAT_TEMPLATE
    return prepare_tokenizer(tokenizer)


@pytest.mark.parametrize("kind", ["post_processor", "add_bos_token"])
@pytest.mark.parametrize("use_chat_template", [False, True])
def test_prompts_start_with_one_bos_where_the_tokenizer_adds_one(
        kind: str, use_chat_template: bool) -> None:
    """A base model (Llama 3, Mistral, Gemma) saw a BOS before every document: a raw-text
    prompt gets the one its tokenizer adds, a chat-templated one keeps the template's, and
    neither gets two; the sampled rows and the update's rows start with it."""
    tokenizer = bos_tokenizer(kind)
    bos = tokenizer.bos_token_id
    assert tokenizer("ab").input_ids[0] == bos  # the tokenizer does add one
    model = tiny_model(tokenizer, seed=0).eval()
    prompts = [format_prompt({"p": p}, tokenizer, "p", None, use_chat_template)
               for p in ("say 7: abc", "hi")]
    rollout = generate(model, tokenizer, [{}, {}], prompts,
                       Sampling(num_generations=2, max_prompt_length=64,
                                max_completion_length=2))
    body = {False: "say 7: abc", True: "say 7: abc=>"}[use_chat_template]
    for row, mask in zip(rollout.prompt_ids[::2], rollout.prompt_mask[::2], strict=True):
        real = row[mask.bool()].tolist()
        assert real[0] == bos and real.count(bos) == 1, tokenizer.convert_ids_to_tokens(real)
    first = rollout.prompt_ids[0][rollout.prompt_mask[0].bool()].tolist()
    assert first[1:] == tokenizer(body, add_special_tokens=False).input_ids


def test_raw_prompts_of_a_tokenizer_without_bos_get_none() -> None:
    """GPT-2, Qwen and the tiny tokenizer add nothing: nothing is added (a BOS the model never
    saw would be as wrong as a missing one)."""
    tokenizer = prepare_tokenizer(tiny_tokenizer())
    assert tokenizer("ab").input_ids == tokenizer("ab", add_special_tokens=False).input_ids
    prompt = format_prompt({"p": PROMPT}, tokenizer, "p", None, False)
    ids, mask, _ = encode_prompts(tokenizer, [prompt], max_prompt_length=64)
    assert ids[0].tolist() == tokenizer(PROMPT, add_special_tokens=False).input_ids


def test_a_cut_raw_prompt_keeps_its_bos() -> None:
    tokenizer = bos_tokenizer("post_processor")
    prompt = format_prompt({"p": "x" * 40 + " what is 2+3?"}, tokenizer, "p", None, False)
    ids, _, cut = encode_prompts(tokenizer, [prompt], max_prompt_length=10)
    assert cut.tolist() == [True] and ids.shape == (1, 10)
    text = tokenizer("x" * 40 + " what is 2+3?", add_special_tokens=False).input_ids
    assert ids[0].tolist() == [tokenizer.bos_token_id, *text[-9:]]


def test_a_prompt_suffix_ends_the_users_message() -> None:
    """In the templated text the instruction follows the question inside the user's turn (not
    after the assistant header); a raw prompt ends with it; a conversation is left as it is."""
    tokenizer = prepare_tokenizer(tiny_tokenizer())
    assert tokenizer.chat_template
    plain = format_prompt({"p": PROMPT}, tokenizer, "p", None, True).text
    suffixed = format_prompt({"p": PROMPT}, tokenizer, "p", None, True, " Be brief.").text
    assert suffixed == plain.replace(PROMPT, PROMPT + " Be brief.", 1)
    raw = format_prompt({"p": PROMPT}, tokenizer, "p", None, False, " Be brief.").text
    assert raw.endswith(PROMPT + " Be brief.")
    chat = [{"role": "user", "content": PROMPT}]
    assert format_prompt({"p": chat}, tokenizer, "p", None, True, " Be brief.").text == plain
