"""grpo-train and grpo-plot as a user runs them: help, readable errors, a run, a resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.conftest import ServerProcess, free_port
from tests.trainer.cli_runner import RewardClient
from tests.trainer.conftest import seven_rows
from trainer.config import GRPOConfig
from trainer.data import write_jsonl


def grpo_train(*args: str, timeout: int = 300,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainer.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_help_lists_every_option_with_its_default() -> None:
    out = grpo_train("--help")
    assert out.returncode == 0
    for name in GRPOConfig.model_fields:
        assert f"  {name} = " in out.stdout, name
    assert "loss_type = 'dapo'" in out.stdout and "num_generations = 8" in out.stdout


@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        ("loss_type: ppo\n", [], "loss_type: Input should be 'grpo', 'bnpo', 'dr_grpo' or 'dapo'"),
        ("num_generations: 1\n", [], "num_generations: Input should be greater than or equal to 2"),
        ("bogus_option: 3\n", [], "bogus_option: Extra inputs are not permitted"),
        (": : :\n", [], "is not valid YAML"),
        ("", ["--set", "learning_rate"], "expected key=value"),
        ("", ["--set", "max_steps=many"], "max_steps: Input should be a valid integer"),
        ("rollout_engine: vllm\ntemperature: 0.005\n", [],
         "temperature 0.005 is below 0.01, the lowest vLLM samples at"),
        ("", ["--set", "vllm_start_timeout_s=0"],
         "vllm_start_timeout_s: Input should be greater than 0"),
    ],
)
def test_bad_config_is_one_readable_line(tmp_path: Path, config: str, args: list[str],
                                         message: str) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(config)
    out = grpo_train("--config", str(path), *args)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_several_reward_urls(tmp_path: Path) -> None:
    from trainer.cli import parse_args

    args = parse_args(["--reward-url", "http://a:8000, http://b:8000"])
    assert args.reward_url == "http://a:8000, http://b:8000"
    dead = [f"http://127.0.0.1:{free_port()}" for _ in range(2)]
    out = grpo_train("--set", "model=tiny", "--reward-url", ",".join(dead))
    assert out.returncode == 3 and all(u in out.stderr for u in dead), out.stderr
    out = grpo_train("--set", "model=tiny", "--reward-url", " , ")
    assert out.returncode == 2 and "at least one URL" in out.stderr


class _Built(Exception):
    """Stops grpo-train once the trainer has made its code tool."""


@pytest.mark.parametrize("given", [["--reward-url", " http://a:8000 , http://b:8000"],
                                   ["--set", 'reward_url="http://a:8000, http://b:8000"']])
def test_scoring_and_the_tool_read_one_url_list(given: list[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A comma-separated URL is two servers for scoring and the tool's default is the first
    of those same two, from the flag and from the YAML alike."""
    from trainer.cli import main

    clients: list[object] = []
    tools: list[str] = []

    class Client(RewardClient):  # the network edge: what the trainer hands RewardClient
        def __init__(self, urls: object, **options: object) -> None:
            clients.append(urls)

    def code_tool(url: str, **options: object) -> None:
        tools.append(url)
        raise _Built

    monkeypatch.setattr("reward_server.client.RewardClient", Client)
    monkeypatch.setattr("trainer.train.CodeTool", code_tool)
    with pytest.raises(_Built):
        main(["--set", "model=tiny", "--set", "code_tool=true", *given])
    assert clients == [["http://a:8000", "http://b:8000"]] * 2  # the probe, the client
    assert tools == ["http://a:8000"]


def test_bad_reward_url_is_one_readable_line() -> None:
    out = grpo_train("--set", "model=tiny", "--reward-url", "http://a:8000,b:8000")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "reward_url: " in out.stderr and "'b:8000' is not an http(s) URL" in out.stderr
    assert "Traceback" not in out.stderr


def test_missing_files_and_server(tmp_path: Path) -> None:
    out = grpo_train("--set", "model=tiny", "--set", f"dataset={tmp_path}/nope.jsonl")
    assert out.returncode == 2 and "dataset not found" in out.stderr
    out = grpo_train("--set", f"model={tmp_path}/no-model")
    assert out.returncode == 2 and "never downloaded" in out.stderr
    data = tmp_path / "d.jsonl"
    write_jsonl(seven_rows(4), data)
    out = grpo_train("--set", "model=tiny", "--set", f"dataset={data}",
                     "--reward-url", f"http://127.0.0.1:{free_port()}",
                     "--set", "reward_max_attempts=1")
    assert out.returncode == 3 and "reward server unavailable" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_missing_vllm_environment_is_one_readable_line(tmp_path: Path,
                                                         server: ServerProcess) -> None:
    data = tmp_path / "d.jsonl"
    write_jsonl(seven_rows(4), data)
    out = grpo_train("--set", "model=tiny", "--set", f"dataset={data}", "--reward-url",
                     server.url, "--set", "rollout_engine=vllm",
                     "--set", f"vllm_python={tmp_path}/no-venv/bin/python")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "no vLLM environment" in out.stderr and "setup_vllm.sh" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_model_the_engine_cannot_run_is_one_readable_line(tmp_path: Path,
                                                            server: ServerProcess,
                                                            vllm_engine: Any) -> None:
    """The tiny model's default heads are 16-dimensional, which vLLM's CPU attention does not
    take: the engine fails at its start, and the run stops there with one line naming the
    settings (not at step 0's draw, with the engine's traceback on the terminal), the
    traceback in the run's folder. (``vllm_engine``: only to skip without vLLM.)"""
    if torch.cuda.is_available():
        pytest.skip("a GPU's attention runs 16-dimensional heads")
    data = tmp_path / "d.jsonl"
    write_jsonl(seven_rows(4), data)
    run = tmp_path / "run"
    out = grpo_train("--set", "model=tiny", "--set", f"dataset={data}", "--reward-url",
                     server.url, "--set", "rollout_engine=vllm", "--set", f"output_dir={run}",
                     "--set", "vllm_kv_cache_gb=1")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("grpo-train: the vLLM engine could not start"), last
    assert "rollout_engine: hf" in last and "vllm_dtype" in last
    assert "head_dim" in last  # vLLM's own reason
    assert "Traceback" in (run / "engine_error.log").read_text()


# A stand-in engine process (no vLLM) that notes in MARKS each start and each close it is
# told, and fails every weight load after the start's check with a multi-line error, as
# vLLM's can.
_RECORDING_ENGINE = """
import os, sys
from trainer.engine import wire
marks = open(os.environ["MARKS"], "a")
connection = wire.Channel(int(sys.argv[sys.argv.index("--fd") + 1]))
connection.recv()
print("started", file=marks, flush=True)
connection.send({"ok": True})
request = connection.recv()  # the client's check of the start's weights: taken whole
connection.send({"ok": True, "value": {"weights": 1, "not_loaded": [], "not_updated": []}})
while True:
    request = connection.recv()
    if request["op"] == "close":
        print("closed", file=marks, flush=True)
        connection.send({"ok": True})
        sys.exit(0)
    connection.send({"ok": False, "error": "RuntimeError: load failed\\nsecond line"})
"""


def _recording_engine(tmp_path: Path) -> tuple[Path, Path]:
    script, python = tmp_path / "engine.py", tmp_path / "engine"
    script.write_text(_RECORDING_ENGINE)
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    return python, tmp_path / "marks"


def test_resume_ends_its_engine_whatever_stops_it(tmp_path: Path,
                                                  server: ServerProcess) -> None:
    """--resume hands the checkpoint's weights to the engine, a request that can fail: that
    is one line, exit code 3 (as an engine failing mid-run), and the engine is ended. With
    no checkpoint to resume from, no engine is started at all."""
    data = tmp_path / "d.jsonl"
    write_jsonl(seven_rows(4), data)
    run = tmp_path / "run"
    python, marks = _recording_engine(tmp_path)
    common = ["--set", "model=tiny", "--set", f"dataset={data}", "--reward-url", server.url,
              "--set", f"output_dir={run}", "--set", "max_completion_length=4",
              "--set", "progress_bar=false"]
    engine = ["--set", "rollout_engine=vllm", "--set", f"vllm_python={python}"]
    env = {**os.environ, "MARKS": str(marks)}
    out = grpo_train(*common, *engine, "--resume", env=env)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "no checkpoint" in out.stderr and not marks.exists()
    assert grpo_train(*common, "--set", "max_steps=1").returncode == 0  # hf: a checkpoint
    out = grpo_train(*common, *engine, "--resume", "--set", "max_steps=2", env=env)
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("grpo-train: --resume from") and "load failed" in last, last
    assert marks.read_text().split() == ["started", "closed"]


def test_run_plot_and_resume(tmp_path: Path, server: ServerProcess) -> None:
    data = tmp_path / "train.jsonl"
    write_jsonl(seven_rows(), data)
    run = tmp_path / "run"
    config = tmp_path / "cfg.yaml"
    config.write_text(f"""
model: tiny
dataset: {data}
eval_dataset: {data}
eval_samples: 8
output_dir: {run}
max_steps: 3
max_completion_length: 6
learning_rate: 3.0e-3
micro_batch_size: 32
save_every: 2
progress_bar: false
""")
    out = grpo_train("--config", str(config), "--reward-url", server.url)
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert "eval/accuracy" in records[0] and "eval/accuracy" in records[-1]
    assert (run / "curves.png").stat().st_size > 10_000
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-000002",
                                                                "checkpoint-000003"]
    out = grpo_train("--config", str(config), "--reward-url", server.url, "--resume",
                     "--set", "max_steps=5")
    assert out.returncode == 0, out.stderr
    assert "resumed from" in out.stdout and "checkpoint-000003" in out.stdout
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-2:] == [4, 5]
    plot = subprocess.run([sys.executable, "-m", "trainer.plot", str(run), "--out",
                           str(tmp_path / "p.png")], capture_output=True, text=True, timeout=120)
    assert plot.returncode == 0 and (tmp_path / "p.png").exists()
    bad = subprocess.run([sys.executable, "-m", "trainer.plot", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no metrics.jsonl" in bad.stderr
    compared = subprocess.run([sys.executable, "-m", "trainer.plot", str(run), str(run),
                               "--out", str(tmp_path / "c.png")],
                              capture_output=True, text=True, timeout=120)
    assert compared.returncode == 0 and (tmp_path / "c.png").stat().st_size > 10_000
    no_out = subprocess.run([sys.executable, "-m", "trainer.plot", str(run), str(run)],
                            capture_output=True, text=True, timeout=120)
    assert no_out.returncode == 2 and "--out" in no_out.stderr


def test_a_held_sigterm_waits_however_many_come() -> None:
    """While ranks train (or one rank updates), SIGTERM is only counted, however many come
    (Slurm signals a rank itself and through torchrun: two); the step's end acts on them.
    Not held, one stops the run at once."""
    from trainer import interrupt

    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        restore = interrupt.sigterm_as_interrupt()
        try:
            interrupt.hold_sigterm(True)
            assert interrupt.sigterm_count() == 0
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)
            assert interrupt.sigterm_count() == 2
            interrupt.hold_sigterm(False)
            with pytest.raises(interrupt.Terminated):
                signal.raise_signal(signal.SIGTERM)
            assert interrupt.sigterm_count() == 3
        finally:
            interrupt.hold_sigterm(False)
            restore()
    finally:
        signal.signal(signal.SIGTERM, before)


def _callers_own(signum: int, frame: object) -> None:
    """A SIGTERM handler of the trainer's caller's own (Ray's, a launcher's)."""


def test_sigterm_takes_ctrl_cs_way_out_and_ends_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM (torchrun, Slurm, Kubernetes, ``timeout``) is raised where Ctrl-C's
    KeyboardInterrupt would be, so the trainer's cleanup runs (Python's default ran none);
    the run ends with one line and 128 + the signal's number, and the handler is the
    default again afterwards."""
    from trainer import cli, interrupt

    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # whatever earlier tests left
    try:
        restore = interrupt.sigterm_as_interrupt()
        try:
            with pytest.raises(KeyboardInterrupt) as raised:
                signal.raise_signal(signal.SIGTERM)
        finally:
            restore()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        signal.signal(signal.SIGTERM, _callers_own)
        interrupt.sigterm_as_interrupt()()
        assert signal.getsignal(signal.SIGTERM) is _callers_own, "a caller's handler stays"
    finally:
        signal.signal(signal.SIGTERM, before)
    assert cli._interrupted(raised.value, 3, tmp_path) == 143
    assert cli._interrupted(KeyboardInterrupt(), None, tmp_path) == 130
    assert capsys.readouterr().err.splitlines() == [
        "grpo-train: interrupted (SIGTERM) at step 3; no checkpoint was written",
        "grpo-train: interrupted (SIGINT) before training; no checkpoint was written"]


def test_a_line_is_written_whole_so_ranks_lines_never_run_together(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torchrun the ranks share one stderr; ``print`` wrote a line's text and its
    newline in two calls, and two ranks' lines ran together on one. Each is one call now."""
    from trainer import cli

    writes: list[str] = []

    class Recording:
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stderr", Recording())
    cli._interrupted(KeyboardInterrupt(), 2, "/nonexistent")
    assert writes == ["grpo-train: interrupted (SIGINT) at step 2; no checkpoint was written\n"]
