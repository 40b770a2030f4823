"""Over whole steps, with rollouts drawn from each trainer's current weights, our trainer and
TRL 1.16's follow one trajectory (``bench/bench_lockstep.py``): both draw through one seeded
sampler, and everything after the draw (the prompts each takes, how it cuts and decodes a
completion, the cut flags its reward gets, advantages, loss, optimizer) is its own. Where
``test_matches_trl`` fixes one batch, here each step's batch comes from the weights the
steps before made, so a difference anywhere in a step shows in the next step's draws."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import bench_learning, bench_lockstep

pytestmark = [
    pytest.mark.slow,  # two trainers, three steps each on the tiny model: seconds
    pytest.mark.filterwarnings("ignore:.*deprecated and will be removed in v6:FutureWarning"),
]

STEPS = 3


def reward_with_spread(completions: list, rows: list[dict], truncated: list[bool]) -> list[float]:
    """The tiny model answers no sum: pay an even number of characters instead, so groups
    differ and the weights move; a cut completion pays nothing, as the demo's reward has it."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [0.0 if cut else float(len(t) % 2 == 0) for t, cut in zip(texts, truncated, strict=True)]


def test_ours_and_trl_draw_alike_step_after_step(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    torch.set_num_threads(1)
    monkeypatch.setattr(bench_learning, "RESULTS", tmp_path)
    monkeypatch.setattr(bench_lockstep, "RESULTS", tmp_path)
    monkeypatch.setattr(bench_learning, "reward_demo", reward_with_spread)
    runs: dict[str, dict[str, Any]] = {
        which: bench_lockstep.child(which, "tiny", STEPS, 1, 4, seed=1) for which in ("ours", "trl")}
    steps = bench_lockstep.compare(runs["ours"], runs["trl"])
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    for s in steps:
        assert s["same_completions"] == s["completions"] == 32, s
    at_limit = [len(c) == 16 for draw in runs["trl"]["draws"] for c in draw]
    assert any(at_limit) and not all(at_limit)  # cut and finished completions both drawn
    moved = [s["weights_moved"] for s in steps]
    assert moved[0] == 0 and moved[-1] > 0  # the updates moved the weights the draws came from
    for s in steps[1:]:
        assert s["weights_apart"] <= 1e-4 * s["weights_moved"], s
    assert [p["step"] for p in runs["ours"]["points"]] == [p["step"] for p in runs["trl"]["points"]]
