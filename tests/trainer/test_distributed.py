"""DDP on two CPU processes (gloo): prompts are sharded over ranks and the ranks' weights
stay identical after every update."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ServerProcess, free_port

WORKER = Path(__file__).with_name("ddp_worker.py")


def test_two_ranks_stay_identical(tmp_path: Path, server: ServerProcess) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", str(free_port()), str(WORKER), server.url, str(tmp_path)],
        capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    rank0 = (tmp_path / "rank0.txt").read_text().splitlines()
    rank1 = (tmp_path / "rank1.txt").read_text().splitlines()
    assert rank0[0] == rank1[0]  # the same weights, to the last bit
    assert not set(rank0[1:]) & set(rank1[1:])  # different prompts on each rank
    assert (tmp_path / "run" / "metrics.jsonl").exists()  # rank 0 logs
