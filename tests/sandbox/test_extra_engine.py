"""The second Docker engine the gVisor tests share: one that stopped answering is brought
back before the next test, and one that cannot come back fails the rest at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.testing import IMAGE, ExtraEngine


def test_a_stopped_engine_is_restarted_with_its_image(stoppable_engine: ExtraEngine) -> None:
    assert stoppable_engine.answers()
    stoppable_engine.stop()
    assert not stoppable_engine.answers()
    stoppable_engine.ensure_running()
    assert stoppable_engine.answers()
    assert stoppable_engine.docker("image", "inspect", IMAGE).returncode == 0


def test_an_engine_that_cannot_restart_fails_every_later_caller_without_retrying(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = ExtraEngine(tmp_path)  # never started: it does not answer
    starts: list[int] = []

    def start_fails() -> None:
        starts.append(1)
        raise RuntimeError("second dockerd did not start: address in use")

    monkeypatch.setattr(engine, "start", start_fails)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="did not restart: second dockerd did not start"):
            engine.ensure_running()
    assert starts == [1]
