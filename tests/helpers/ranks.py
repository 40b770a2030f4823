"""Two training ranks on this machine, as ``torchrun`` starts them, for the DDP and FSDP
tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil


def run_ranks(worker: Path, *args: str, timeout_s: float = 600,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``worker`` on two ranks. ``--standalone``: the rendezvous binds a port of the
    kernel's choosing (one picked free beforehand may be taken by a test server meanwhile,
    and the ranks then wait on a stranger's socket). Past ``timeout_s`` the launcher and its
    ranks go together: killing the launcher alone left a rank waiting for ever (torchrun
    starts each rank in a session of its own, so its process group is not theirs)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--standalone", str(worker), *args]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                **(env or {})}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=full_env) as launcher:
        try:
            stdout, stderr = launcher.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for process in [*psutil.Process(launcher.pid).children(recursive=True),
                            psutil.Process(launcher.pid)]:
                try:
                    process.kill()
                except psutil.NoSuchProcess:
                    pass
            launcher.communicate()
            raise
    return subprocess.CompletedProcess(command, launcher.returncode, stdout, stderr)
