"""How a run ends when it does not end by itself: an engine that dies on one rank of
several, Ctrl-C, SIGTERM, a trainer killed outright, and a hand-over of weights at the
end of a run that finished. ``grpo-train`` runs whole in a process of its own, with a
stand-in engine (tests/trainer/stand_in_engine.py) and reward server
(tests/trainer/cli_runner.py); no vLLM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers.held_rewards import held_rewards
from tests.helpers.ranks import kill_ranks, run_ranks, start_ranks
from tests.trainer.test_engine_process import ended

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


class Run:
    """A run's folders: its output, the stand-in engine's reports, its shared memory."""

    def __init__(self, tmp_path: Path) -> None:
        self.out, self.reports, self.shm = (tmp_path / "run", tmp_path / "reports",
                                            tmp_path / "shm")
        self.reports.mkdir()
        self.shm.mkdir()
        self.python = tmp_path / "python"
        self.python.write_text(f"#!/bin/sh\nexec {sys.executable} "
                               f"{HERE / 'stand_in_engine.py'} \"$@\"\n")
        self.python.chmod(0o755)
        self.trainers: list[subprocess.Popen[str]] = []

    def args(self, *sets: str) -> list[str]:
        options = ["rollout_engine=vllm", f"vllm_python={self.python}", "device=cpu",
                   f"output_dir={self.out}", "progress_bar=false", "max_steps=4",
                   "vllm_request_timeout_s=3600", *sets]
        return ["--config", "examples/grpo_tiny.yaml",
                *[arg for option in options for arg in ("--set", option)]]

    def env(self, **stand_in: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
                "STAND_IN_DIR": str(self.reports), "STAND_IN_SHM": str(self.shm),
                **{f"STAND_IN_{k}": v for k, v in stand_in.items()}}

    def start(self, *sets: str, **stand_in: str) -> subprocess.Popen[str]:
        trainer = subprocess.Popen([sys.executable, str(HERE / "cli_runner.py"),
                                    *self.args(*sets)], cwd=REPO, env=self.env(**stand_in),
                                   text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.trainers.append(trainer)
        return trainer

    def wait_for(self, report: str, trainer: subprocess.Popen[str]) -> None:
        """Until the stand-in engine reports ``report`` (the trainer still running)."""
        while not (self.reports / report).exists():
            assert trainer.poll() is None, trainer.communicate()
            time.sleep(0.2)

    def engine_pids(self) -> list[int]:
        return [int(p.read_text()) for p in self.reports.glob("engine-*.pid")]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    run = Run(tmp_path)
    yield run
    for trainer in run.trainers:  # a test that failed leaves nothing behind
        trainer.kill()
        trainer.communicate()
    for pid in run.engine_pids():
        try:
            engine = psutil.Process(pid)
            if "stand_in_engine.py" in " ".join(engine.cmdline()):  # not a pid reused since
                engine.kill()
        except psutil.Error:
            pass


def lines_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("grpo-train:")]


def test_an_engine_that_dies_on_one_rank_stops_every_rank_with_a_checkpoint(
        run: Run) -> None:
    """Rank 1's engine exits at its second draw. Rank 1 stopping alone (saving, which
    waits for every rank) while rank 0 waits for it in the step's all-reduce hung both for
    good; now every rank learns of it, all save the last completed step together, and
    each ends with one line."""
    result = run_ranks(HERE / "cli_runner.py", *run.args(), timeout_s=300,
                       env=run.env(DIE_GENERATE="2", RANK="1"))
    lines = lines_of(result.stderr)
    assert result.returncode != 0
    assert len(lines) == 2, result.stderr[-3000:]
    assert all(line.startswith("grpo-train: stopped at step 1:") for line in lines), lines
    assert sum("rank 1 failed: the vLLM engine process exited (7)" in line
               for line in lines) == 1, lines
    assert (run.out / "checkpoint-000001").is_dir()
    assert all(ended(pid) for pid in run.engine_pids())
    assert list(run.shm.iterdir()) == []


def test_an_engine_that_cannot_start_on_one_rank_stops_every_rank_with_a_line(
        run: Run) -> None:
    """Rank 1's engine refuses to start. Rank 1 said so and left; rank 0, its engine
    started, went on into the first step's collective and died there with a traceback
    (under NCCL it would wait for its timeout). Now the ranks agree first: each ends with
    one line, and rank 0 closes the engine it started."""
    result = run_ranks(HERE / "cli_runner.py", *run.args(), timeout_s=300,
                       env=run.env(FAIL_START="1", RANK="1"))
    assert result.returncode != 0
    # the launcher's own report of a failed rank is a traceback through torch; none of ours
    assert not re.search(r'File ".*/trainer/', result.stderr), result.stderr[-3000:]
    lines = lines_of(result.stderr)
    assert len(lines) == 2, result.stderr[-3000:]
    assert sum("no room for the model" in line for line in lines) == 2, lines
    assert sum("rank 1 failed" in line for line in lines) == 1, lines
    assert all(ended(pid) for pid in run.engine_pids())
    assert list(run.shm.iterdir()) == []


def test_a_start_the_engine_took_in_part_is_one_line_before_any_step(run: Run) -> None:
    """The engine's start left a weight of the policy out (a name its model lacks): the run
    ends with one line naming it, exit 2, before a step is drawn from the wrong weights."""
    trainer = run.start(SKIP_START_LOAD="1")
    _, stderr = trainer.communicate(timeout=300)
    assert trainer.returncode == 2, stderr[-3000:]
    assert "Traceback" not in stderr
    [line] = lines_of(stderr)
    assert "took 19 of the 20 weights it was sent, not model.layers.0.mlp.down_proj.bias" \
        in line, line
    assert not list(run.reports.glob("generate-*"))
    assert not list(run.out.glob("checkpoint-*"))
    assert all(ended(pid) for pid in run.engine_pids())
    assert list(run.shm.iterdir()) == []


@pytest.mark.parametrize("to", ["torchrun", "slurm-step", "engines"])
def test_sigterm_to_a_torchrun_job_saves_every_ranks_step_and_stops_them_together(
        run: Run, to: str) -> None:
    """SIGTERM to torchrun (``torchrun``: it forwards it to its ranks), or as Slurm sends it
    at scancel or preemption, to every process of the job at once: the ranks themselves too
    (``slurm-step``: each gets two), or the engines too (``engines``: in the job's cgroup
    whatever their session). Each rank was interrupted wherever it stood, so no rank could
    save (a checkpoint needs them all); then a second SIGTERM stopped a rank on the spot,
    saving nothing, and an engine dying of it ended the run as an engine failure (exit 3).
    Now the ranks hold it to the end of the step, agree, save that step together and each
    ends with one line and 143, the launcher's grace (30 s, then SIGKILL) to spare."""
    launcher = start_ranks(HERE / "cli_runner.py", *run.args("max_steps=400"), env=run.env())
    try:
        metrics = run.out / "metrics.jsonl"
        while not (metrics.exists() and '"step": 1' in metrics.read_text()):
            assert launcher.poll() is None, launcher.communicate()
            time.sleep(0.1)
        ranks = [p.pid for p in psutil.Process(launcher.pid).children()]
        also = {"torchrun": [], "slurm-step": ranks, "engines": run.engine_pids()}[to]
        for pid in [launcher.pid, *also]:
            os.kill(pid, signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=150)
    finally:
        if launcher.poll() is None:
            kill_ranks(launcher)
    assert not re.search(r'File ".*/trainer/', stderr), stderr[-3000:]
    lines = lines_of(stderr)
    assert len(lines) == 2, stderr[-3000:]
    steps = {int(re.search(r"interrupted \(SIGTERM\) at step (\d+);", line).group(1))  # type: ignore[union-attr]
             for line in lines}
    [step] = steps  # the same step on both ranks
    assert 1 <= step < 400
    assert all(f"checkpoint-{step:06d}" in line for line in lines), lines
    assert (run.out / f"checkpoint-{step:06d}").is_dir()
    assert all(ended(pid) for pid in run.engine_pids())
    assert list(run.shm.iterdir()) == []


def test_sigterm_while_a_rank_waits_for_its_peers_ends_it(run: Run) -> None:
    """Rank 0 of two, its peer never coming: waiting in the rendezvous, it took no signal
    but SIGKILL (the SIGTERM handler was set before the rendezvous, and a Python handler
    runs only once the call in hand returns). SIGTERM now ends it."""
    env = {**run.env(), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}
    trainer = subprocess.Popen([sys.executable, str(HERE / "cli_runner.py"), *run.args()],
                               cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    run.trainers.append(trainer)
    process = psutil.Process(trainer.pid)
    while not [c for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN]:
        assert trainer.poll() is None, trainer.communicate()
        time.sleep(0.2)  # until it hosts the rendezvous's store and waits there
    trainer.send_signal(signal.SIGTERM)
    trainer.communicate(timeout=120)
    assert trainer.returncode == -signal.SIGTERM


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_ctrl_c_while_a_draw_is_in_flight(run: Run, max_staleness: int) -> None:
    """Ctrl-C while the engine draws (here a draw that never ends; a real one can take up
    to vllm_request_timeout_s): the engine is ended rather than waited for or handed
    weights, the last completed step is saved, and the run ends with one line and exit
    code 130, no traceback, nothing left in shared memory."""
    trainer = run.start(f"max_staleness={max_staleness}",
                        HANG_GENERATE="2" if max_staleness == 0 else "3")
    run.wait_for("generate-0-2" if max_staleness == 0 else "generate-0-3", trainer)
    # drawing ahead, the third draw starts while step 2's update runs: an interrupt in an
    # update saves nothing (the policy is half-way), so it comes once step 2 is logged
    metrics = run.out / "metrics.jsonl"
    while max_staleness and not (metrics.exists() and '"step": 2' in metrics.read_text()):
        assert trainer.poll() is None, trainer.communicate()
        time.sleep(0.2)
    engine = run.engine_pids()[0]
    trainer.send_signal(signal.SIGINT)
    _, stderr = trainer.communicate(timeout=120)
    assert trainer.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr
    [line] = lines_of(stderr)
    step = int(re.search(r"interrupted \(SIGINT\) at step (\d+);", line).group(1))  # type: ignore[union-attr]
    assert step >= 1 and f"checkpoint-{step:06d}" in line
    assert (run.out / f"checkpoint-{step:06d}").is_dir()
    assert ended(engine)
    assert list(run.shm.iterdir()) == []


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_sigterm_during_a_weight_sync_takes_ctrl_cs_way_out(run: Run,
                                                             max_staleness: int) -> None:
    """SIGTERM (torchrun, Slurm, Kubernetes, ``timeout``) while the engine loads new
    weights (drawing ahead: on the drawing thread): Python's default ended the trainer on
    the spot, leaving the model-sized copy in shared memory and the engine running. Now
    the same orderly end as Ctrl-C."""
    trainer = run.start(f"max_staleness={max_staleness}", HANG_LOAD="1")
    run.wait_for("load_weights-0-1", trainer)
    assert list(run.shm.glob("*/*.safetensors"))  # the copy it loads, in its locked folder
    engine = run.engine_pids()[0]
    trainer.send_signal(signal.SIGTERM)
    _, stderr = trainer.communicate(timeout=120)
    assert trainer.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "Traceback" not in stderr
    [line] = lines_of(stderr)
    step = int(re.search(r"interrupted \(SIGTERM\) at step (\d+);", line).group(1))  # type: ignore[union-attr]
    assert step >= 1 and (run.out / f"checkpoint-{step:06d}").is_dir()
    assert ended(engine)
    assert list(run.shm.iterdir()) == []


def test_an_engine_never_outlives_a_killed_trainer(run: Run) -> None:
    """A trainer killed outright (SIGKILL, the OOM killer, a second Ctrl-C in its
    cleanup) runs no cleanup at all: its engine, in the middle of a draw, would run on,
    adopted, holding its memory. The kernel ends it with the trainer."""
    trainer = run.start(HANG_GENERATE="2")
    run.wait_for("generate-0-2", trainer)
    engine = run.engine_pids()[0]
    trainer.kill()
    trainer.communicate()
    assert ended(engine)


def test_a_finished_async_run_is_not_failed_by_a_last_hand_over(run: Run) -> None:
    """Drawing ahead, weights staged after the last step were handed to the engine as it
    closed; a load failing there reported a run whose every step trained as stopped, and
    skipped the rest of the cleanup and the plot. Nothing samples after the last step:
    no hand-over."""
    trainer = run.start("max_steps=2", "max_staleness=2", FAIL_LOAD="1")
    _, stderr = trainer.communicate(timeout=300)
    assert trainer.returncode == 0, stderr[-3000:]
    assert lines_of(stderr) == []
    assert (run.out / "checkpoint-000002").is_dir()
    assert (run.out / "curves.png").is_file()
    assert not list(run.reports.glob("load_weights-*"))


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_a_sync_the_engine_took_in_part_stops_the_run_with_one_line(
        run: Run, max_staleness: int) -> None:
    """The engine says it did not take a weight of step 1's sync (a name its model lacks)
    and left a parameter as it was: the run stops with a checkpoint and one line naming
    the step and the names, rather than training on from an engine with stale weights."""
    trainer = run.start(f"max_staleness={max_staleness}", SKIP_LOAD="1")
    _, stderr = trainer.communicate(timeout=300)
    assert trainer.returncode == 3, stderr[-3000:]
    assert "Traceback" not in stderr
    [line] = lines_of(stderr)
    step = int(re.search(r"stopped at step (\d+):", line).group(1))  # type: ignore[union-attr]
    assert step >= 1 and (run.out / f"checkpoint-{step:06d}").is_dir()
    assert ("took 19 of the 20 weights it was sent, not _orig_mod.model.norm.weight; and left "
            "1 of its parameters as they were: model.norm.weight") in line


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_does_not_wait_for_a_reward_request_in_flight(
        run: Run, signum: int) -> None:
    """Ctrl-C (or SIGTERM) while the reward server holds a request: closing the scorer
    waited for it (up to reward_timeout_s a try, and a hung server's retries after), so
    the run could not end. Now the request is ended on the client's side, and the run
    ends with its one line and 128 + the signal while the server has not answered."""
    with held_rewards(hold=1) as server:
        trainer = run.start(f"reward_url={server.url}", "reward_timeout_s=600",
                            REWARDS="server")
        while not server.held.is_set():
            assert trainer.poll() is None, trainer.communicate()
            server.held.wait(0.2)
        trainer.send_signal(signum)
        server.note("interrupted")
        _, stderr = trainer.communicate(timeout=300)
        server.note(f"exited {trainer.returncode}")
        server.release.set()
        server.answered.wait(60)
    assert server.events == ["held", "interrupted", f"exited {128 + signum}", "answered"], \
        stderr[-3000:]
    assert "Traceback" not in stderr
    [line] = lines_of(stderr)
    assert line.startswith(f"grpo-train: interrupted ({signal.Signals(signum).name}) at step 0")
