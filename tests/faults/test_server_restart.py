"""The reward server dies in the middle of a training run and comes back: the trainer waits
for it, scores the step in full once it is back, and finishes; or, when it does not come
back in time, stops loudly with a checkpoint from which --resume goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from tests.conftest import free_port, run_server
from tests.trainer.conftest import seven_rows
from trainer.data import write_jsonl


def _config(tmp_path: Path, steps: int, retry_for_s: float) -> Path:
    data = tmp_path / "train.jsonl"
    write_jsonl(seven_rows(), data)
    config = tmp_path / "cfg.yaml"
    config.write_text(f"""
model: tiny
dataset: {data}
output_dir: {tmp_path / "run"}
max_steps: {steps}
max_completion_length: 6
learning_rate: 3.0e-3
micro_batch_size: 32
progress_bar: false
reward_retry_for_s: {retry_for_s}
""")
    return config


def _records(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _start_after_first_step(config: Path, url: str, run: Path) -> subprocess.Popen:
    """grpo-train, running, once its first step is logged."""
    trainer = subprocess.Popen(
        [sys.executable, "-m", "trainer.cli", "--config", str(config), "--reward-url", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while not _records(run):
        assert trainer.poll() is None, trainer.communicate()
        assert time.monotonic() < deadline, "no step finished"
        time.sleep(0.1)
    return trainer


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the server and its math workers, no goodbye
    proc.wait(timeout=10)


def test_trainer_rides_out_a_server_restart(tmp_path: Path) -> None:
    port = free_port()
    config = _config(tmp_path, steps=6, retry_for_s=180)
    run = tmp_path / "run"
    with ExitStack() as stack:
        first = stack.enter_context(run_server(tmp_path / "a", port=port))
        trainer = _start_after_first_step(config, first.url, run)
        _kill(first.proc)
        down_at = time.monotonic()
        time.sleep(4.0)  # the trainer meanwhile needs rewards and gets none
        stack.enter_context(run_server(tmp_path / "b", port=port))
        outage_s = time.monotonic() - down_at
        _, stderr = trainer.communicate(timeout=300)
    assert trainer.returncode == 0, stderr
    records = _records(run)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    # every step had every reward (none silently missing or NaN) ...
    assert all(r["rewards/math/unscorable_rate"] == 0.0 for r in records)
    assert all(r["reward"] == r["reward"] for r in records)  # not NaN
    # ... and one step visibly waited through the outage for them
    assert max(r["time/reward_wait"] for r in records) > 0.5 * outage_s


def test_trainer_stops_with_a_checkpoint_when_the_server_stays_down(tmp_path: Path) -> None:
    port = free_port()
    config = _config(tmp_path, steps=4, retry_for_s=3)
    run = tmp_path / "run"
    with run_server(tmp_path / "a", port=port) as srv:
        trainer = _start_after_first_step(config, srv.url, run)
        _kill(srv.proc)
        _, stderr = trainer.communicate(timeout=120)
    assert trainer.returncode == 3, stderr
    assert "Traceback" not in stderr
    done = [r["step"] for r in _records(run)]
    assert f"stopped at step {done[-1]}" in stderr and "--resume" in stderr
    assert (run / f"checkpoint-{done[-1]:06d}").is_dir()
    # the server is back: --resume picks up exactly where the work stopped
    with run_server(tmp_path / "b", port=port) as srv:
        out = subprocess.run(
            [sys.executable, "-m", "trainer.cli", "--config", str(config),
             "--reward-url", srv.url, "--resume"],
            capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert [r["step"] for r in _records(run)] == list(range(1, 5))
