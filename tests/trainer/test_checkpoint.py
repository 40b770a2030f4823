"""Which checkpoint ``--resume`` picks (trainer/checkpoint.py)."""

from __future__ import annotations

from pathlib import Path

from trainer import checkpoint


def test_resume_never_picks_a_checkpoint_killed_mid_save(tmp_path: Path) -> None:
    """A save writes its state into ``checkpoint-N.tmp`` before the ranks' files and the
    rename: a run killed in between left a folder that looked whole and sorted last, and
    --resume read it (a traceback for its missing rank file, or another rank's position)."""
    for name in ("checkpoint-000002", "checkpoint-000004.tmp", "checkpoint-notes"):
        (tmp_path / name).mkdir()
        (tmp_path / name / checkpoint.STATE_FILE).write_bytes(b"x")
    (tmp_path / "checkpoint-000003").mkdir()  # no state: not finished either
    assert checkpoint.latest_checkpoint(tmp_path) == tmp_path / "checkpoint-000002"
    assert checkpoint.latest_checkpoint(tmp_path / "none") is None
