"""TensorBoard and W&B (offline mode: no account, no network) receive every scalar."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.metrics import RunLogger

pytestmark = [pytest.mark.slow,  # a training run: seconds
              pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                                         "ignore::FutureWarning")]


def test_tensorboard_and_wandb_get_every_scalar(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = RunLogger(tmp_path, 3, progress_bar=False, report_to=["tensorboard", "wandb"],
                       config={"learning_rate": 1e-3})
    for step in (1, 2, 3):
        logger.log(step, {"reward": 0.25 * step, "loss": 1.0 / step, "note": "text"})
    logger.close()

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["loss", "reward"]
    assert [(e.step, e.value) for e in events.Scalars("reward")] == [(1, 0.25), (2, 0.5),
                                                                     (3, 0.75)]
    # W&B offline: the run file (protobuf records; wandb 0.31 ships no reader for it) holds
    # the config and each logged key and value, for `wandb sync` to upload later
    runs = list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    data = runs[0].read_bytes()
    for needle in (b"learning_rate", b"reward", b"loss", b"0.25", b"0.5", b"0.75",
                   json.dumps(1 / 3).encode()):
        assert needle in data, needle
