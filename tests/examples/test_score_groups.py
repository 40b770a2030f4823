"""The README's client example (examples/score_groups.py) against the real server, as a user
runs it: each group's rewards and advantages printed, a hedge scored 0, the sandbox's code
group scored by its tests."""

from __future__ import annotations

import subprocess
import sys

from reward_server.testing import ServerProcess, wait_for_sandbox
from tests.conftest import ROOT


def test_score_groups_prints_each_groups_rewards_and_advantages(server: ServerProcess) -> None:
    wait_for_sandbox(server.url, timeout_s=180)
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "score_groups.py"),
                          "--url", server.url], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    natalia = next(i for i, line in enumerate(lines) if line.startswith("Natalia"))
    assert lines[natalia + 1] == "  reference '72'; group mean reward 0.62"
    assert lines[natalia + 2].startswith("  r=1 A=+0.72  ok")  # "48 + 24 = 72. #### 72"
    assert lines[natalia + 3].startswith("  r=0 A=-1.21  ok")  # "#### 24": not equivalent
    hedge = next(line for line in lines if r"otherwise \\boxed{5}" in line)  # as repr shows it
    assert hedge.startswith("  r=0 ") and "two different answers" in hedge
    code = lines[next(i for i, line in enumerate(lines) if line.startswith("Read two")) + 1:]
    assert [line.split()[0] for line in code] == ["r=1.0", "r=1.0", "r=0.0", "r=0.5"]
