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
    with start_ranks(worker, *args, env=env) as launcher:
        try:
            stdout, stderr = launcher.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_ranks(launcher)
            raise
    return subprocess.CompletedProcess(launcher.args, launcher.returncode, stdout, stderr)


def start_ranks(worker: Path, *args: str, env: dict[str, str] | None = None
                ) -> subprocess.Popen[str]:
    """The launcher of ``worker`` on two ranks, started and not waited for (a test that
    signals it meanwhile, as a scheduler would)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--standalone", str(worker), *args]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                **(env or {})}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full_env)


def kill_ranks(launcher: subprocess.Popen[str]) -> None:
    """The launcher and its ranks, killed together, and waited for."""
    try:
        processes = [*psutil.Process(launcher.pid).children(recursive=True),
                     psutil.Process(launcher.pid)]
    except psutil.NoSuchProcess:
        processes = []
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    launcher.communicate()
