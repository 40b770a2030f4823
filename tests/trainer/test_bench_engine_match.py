"""The match bench's token-by-token calibration: samples drawn from π/T read as calibrated;
samples drawn at another temperature, or with EOS made likelier, do not (a tiny model
built in code, HF generate as the sampler)."""

import torch

from bench.bench_engine_match import calibration
from trainer.models import tiny_model, tiny_tokenizer
from trainer.rollout import Prompt, Sampling, generate

T = 0.7


def _draws(temperature: float, eos_bias: float = 0.0) -> tuple[object, list, int]:
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, seed=3)
    model.eval()
    eos = tokenizer.eos_token_id
    prompts = [Prompt(f"{a} + {b} =", False) for a in range(4) for b in range(4)]
    rows = [{"prompt": p.text} for p in prompts]
    sampling = Sampling(8, 32, 12, temperature=temperature, share_prompts=False)
    with torch.no_grad():
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(len(tokenizer)))
        model.lm_head.bias[eos] = eos_bias
        torch.manual_seed(0)
        rollouts = [generate(model, tokenizer, rows, prompts, sampling) for _ in range(3)]
        model.lm_head.bias[eos] = 0.0
    return model, rollouts, eos


def test_samples_drawn_from_the_policy_read_as_calibrated() -> None:
    model, rollouts, eos = _draws(T)
    figures = calibration(model, rollouts, T, [eos])
    assert all(abs(f["z"]) < 4 for f in figures.values()), figures
    assert figures["log_prob"]["expected"] < 0


def test_a_sharper_sampler_reads_as_off_in_its_log_probs() -> None:
    model, rollouts, eos = _draws(T / 2)
    figures = calibration(model, rollouts, T, [eos])
    assert figures["log_prob"]["z"] > 6 and figures["argmax"]["z"] > 6, figures


def test_a_sampler_that_stops_too_often_reads_as_off_at_eos() -> None:
    model, rollouts, eos = _draws(T, eos_bias=1.5)
    figures = calibration(model, rollouts, T, [eos])
    assert figures["eos"]["z"] > 6, figures
