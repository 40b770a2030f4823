"""The engine-signal bench's verdict: equal samplers read as equal, a sampler whose batches
carry a weaker mean gradient reads as weaker (synthetic gradients, no model)."""

import torch

from bench.bench_engine_signal import gradient_figures


def _gradients(scale: float, seed: int, R: int = 30, dim: int = 400) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    mu = torch.randn(dim, generator=generator)
    noise = lambda: 2.0 * torch.randn(R, dim, generator=generator)  # noqa: E731
    return {"vllm": scale * mu + noise(), "hf": mu + noise()}


def test_samplers_with_the_same_mean_gradient_read_as_equal() -> None:
    figures = gradient_figures(_gradients(1.0, seed=1), boots=200)
    low, high = figures["mean_gradient"]["norm2_ratio_interval_95"]
    assert low < 1.0 < high
    assert abs(figures["mean_gradient"]["cosine"] - 1.0) < 0.1
    assert abs(figures["alignment_gradient"]["t"]) < 3


def test_a_sampler_whose_batches_teach_less_reads_as_weaker() -> None:
    figures = gradient_figures(_gradients(0.3, seed=2), boots=200)
    assert figures["mean_gradient"]["norm2_ratio_interval_95"][1] < 0.5
    assert figures["mean_gradient"]["inner_over_hf_norm2_interval_95"][1] < 0.6
    assert figures["alignment_gradient"]["t"] < -3
