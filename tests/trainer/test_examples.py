"""The example configs stay valid, and their datasets load and fit their verifiers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from trainer.config import load_config
from trainer.data import load_datasets
from trainer.rewards import RewardScorer

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_config_is_valid(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    config = load_config(path)
    rows, _ = load_datasets(config)
    items = RewardScorer(config.rewards, client=None).items(["completion"], rows[:1])  # type: ignore[arg-type]
    assert [item["verifier"] for item in items] == [r.verifier for r in config.rewards]


def test_there_are_examples() -> None:
    assert {"grpo_arithmetic.yaml", "grpo_code.yaml", "grpo_tiny.yaml"} <= {p.name for p in EXAMPLES}
