"""The helper the DDP and FSDP tests start their ranks with (tests/helpers/ranks.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest

from tests.helpers.ranks import run_ranks

pytestmark = pytest.mark.slow  # two processes started and killed


def test_ranks_past_their_time_go_with_their_launcher(tmp_path: Path) -> None:
    """A CI run timed out a DDP test by killing the launcher alone: a rank was still waiting
    twelve minutes later."""
    worker = tmp_path / "stuck_rank.py"
    worker.write_text("import time\ntime.sleep(3600)\n")
    with pytest.raises(subprocess.TimeoutExpired):
        run_ranks(worker, timeout_s=20)
    left = [p for p in psutil.process_iter(["cmdline"]) if str(worker) in (p.info["cmdline"] or [])]
    assert left == [], left
