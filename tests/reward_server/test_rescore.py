"""``reward-rescore`` on rollouts stored by real runs: our trainer's rollouts.jsonl and TRL
1.16's completions tables, each scored again on a server whose math verdicts differ (a looser
tolerance: every last number within 50% of 7.4 becomes right)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from reward_server.client import RewardClient
from reward_server.rescore import SourceError, rescore
from reward_server.rollout_log import FILE
from tests.conftest import ServerProcess, free_port, run_server
from trainer.config import GRPOConfig, RewardSpec
from trainer.models import load_model, prepare_tokenizer
from trainer.train import GRPOTrainer, seed_everything

LOOSE = {"REWARD_SERVER_MATH_TOLERANCE": "0.5"}
PARAMS = {"extract": "last_number", "truncated": False}  # the tiny model never stops


def rows(n: int) -> list[dict[str, str]]:
    """Prompts whose answer no integer matches exactly and most match within 50%."""
    rng = random.Random(0)
    return [{"prompt": "say 7: " + "".join(rng.choice("abcdefgh") for _ in range(3)),
             "answer": "7.4"} for _ in range(n)]


@pytest.fixture(scope="module")
def loose(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The upgraded server: math with a looser tolerance."""
    with run_server(tmp_path_factory.mktemp("loose"), env=LOOSE) as srv:
        yield srv


@pytest.fixture(scope="module")
def trainer_run(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory of our trainer (one step and its evaluations) with log_rollouts."""
    run = tmp_path_factory.mktemp("run")
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(run), max_steps=1,
                        prompts_per_step=4, num_generations=8, max_completion_length=6,
                        micro_batch_size=32, progress_bar=False, log_rollouts=True,
                        eval_samples=8, rewards=[RewardSpec(verifier="math", params=PARAMS)])
    seed_everything(config.seed)
    model, tokenizer = load_model("tiny", torch.float32, config.seed)
    with RewardClient(server.url) as client:
        GRPOTrainer(model, tokenizer, rows(32), config, client, eval_rows=rows(8)).train()
    return run


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_trainer_rollouts_scored_again(trainer_run: Path, server: ServerProcess,
                                       loose: ServerProcess) -> None:
    stored = _lines(trainer_run / FILE)
    assert len(stored) == 4 * 8 + 2 * 8  # the step's rollouts and two evaluations'
    assert {r["provenance"]["verifier"] for r in stored} == {"math"}
    summary = rescore(trainer_run, loose.url, progress=False)
    out = _lines(trainer_run / "rescored.jsonl")
    assert [line["item"] for line in out] == [r["item"] for r in stored]
    assert [line["previous"]["reward"] for line in out] == [r["reward"] for r in stored]
    with RewardClient(loose.url) as client:  # what the upgraded server says of each item
        assert [line["reward"] for line in out] == client.rewards(
            [r["item"] for r in stored]).rewards
    ups = sum(line["reward"] == 1.0 for line in out)
    assert all(r["reward"] == 0.0 for r in stored) and ups > 0
    assert summary["items"] == len(stored) and summary["changed"] == ups
    assert summary["directions"] == {"up": ups, "down": 0, "to_null": 0, "from_null": 0}
    assert summary["by_verifier"]["math"]["up"] == ups
    math = summary["provenance"]["math"]
    assert math["before"] == [stored[0]["provenance"]["fingerprint"]]
    assert [c.split()[0] for c in math["changes"]] == ["settings"]  # only the tolerance
    assert len(summary["examples"]["math"]["up"]) == 3


def test_an_interrupted_rescore_resumes_after_its_last_whole_line(
        trainer_run: Path, loose: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    full = rescore(trainer_run, loose.url, out, progress=False)
    whole = out.read_bytes()
    lines = whole.splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:10]) + lines[10][:25])  # killed mid-line
    assert rescore(trainer_run, loose.url, out, progress=False, resume=True) == full
    assert out.read_bytes() == whole
    # nothing left to do: no server is asked
    dead = f"http://127.0.0.1:{free_port()}"
    assert rescore(trainer_run, dead, out, progress=False, max_attempts=1, resume=True) == full


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reward_server.rescore", *args],
                          capture_output=True, text=True, timeout=300)


def test_cli_writes_results_and_summary_and_says_what_is_wrong_in_a_line(
        trainer_run: Path, loose: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "new.jsonl"
    done = _cli(str(trainer_run / FILE), "--url", loose.url, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "verdicts changed" in done.stdout and "math provenance: settings" in done.stdout
    assert "item" in done.stderr  # the progress bar
    summary = json.loads((tmp_path / "new.summary.json").read_text())
    assert summary["items"] == len(_lines(out)) and summary["changed"] > 0

    metrics_only = _cli(str(trainer_run / "metrics.jsonl"), "--url", loose.url,
                        "--out", str(tmp_path / "m.jsonl"))
    assert metrics_only.returncode == 2
    assert metrics_only.stderr.strip().splitlines() == [
        f"reward-rescore: metrics.jsonl:1: a metrics line (per-step means), not a scored "
        f"item; the trainer's items are in {FILE} (log_rollouts: true)"]
    down = _cli(str(trainer_run), "--url", f"http://127.0.0.1:{free_port()}", "--out",
                str(tmp_path / "d.jsonl"), "--retry-for-s", "0.5", "--no-progress")
    assert down.returncode == 3 and len(down.stderr.strip().splitlines()) == 1
    assert "run again with --resume" in down.stderr and "Traceback" not in down.stderr


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                            "ignore::FutureWarning")
def test_trl_completion_logs_scored_again(server: ServerProcess, loose: ServerProcess,
                                          tmp_path: Path) -> None:
    from datasets import Dataset
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    from reward_server.adapters.trl import ServerReward

    model, tokenizer = load_model("tiny", torch.float32, 0)
    prepare_tokenizer(tokenizer)
    reward = ServerReward(server.url, verifier="math", params=PARAMS)
    args = TRLConfig(output_dir=str(tmp_path), per_device_train_batch_size=8,
                     num_generations=4, max_completion_length=6, max_steps=2,
                     logging_steps=1, report_to=[], save_strategy="no", use_cpu=True,
                     bf16=False, seed=0, dataloader_num_workers=0, beta=0.0,
                     log_completions=True)
    TRLTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(
        rows(16)), processing_class=tokenizer).train()
    tables = sorted((tmp_path / "completions").glob("*.parquet"))
    assert len(tables) == 2  # TRL's own files, one per logged step

    summary = rescore(tmp_path, loose.url, progress=False)
    out = _lines(tmp_path / "rescored.jsonl")
    assert len(out) == 16 and summary["items"] == 16
    assert out[0]["origin"] == f"{tables[0].name}:0:math_reward"
    assert out[0]["step"] == 1 and out[-1]["step"] == 2
    assert {line["item"]["answer"] for line in out} == {"7.4"}
    assert all(line["previous"]["reward"] == 0.0 for line in out)
    assert all(line["previous"]["result"]["status"] for line in out)
    assert {line["previous"]["provenance"]["verifier"] for line in out} == {"math"}
    ups = sum(line["reward"] == 1.0 for line in out)
    assert ups > 0 and summary["directions"]["up"] == ups == summary["changed"]


def test_an_output_already_there_is_not_taken_for_this_servers_verdicts(
        trainer_run: Path, tmp_path: Path) -> None:
    """A rollouts folder may be someone else's: lines planted as its rescored.jsonl, with the
    right origins and made-up verdicts, are refused, not summarised as the server's."""
    run = tmp_path / "run"
    run.mkdir()
    (run / FILE).write_bytes((trainer_run / FILE).read_bytes())
    planted = [{"origin": f"{FILE}:{n}", "item": {"verifier": "math"}, "reward": 1.0,
                "result": {}, "provenance": {"fingerprint": "deadbeef"}}
               for n in range(1, len(_lines(run / FILE)) + 1)]
    (run / "rescored.jsonl").write_text("".join(json.dumps(p) + "\n" for p in planted))
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SourceError, match="exists: --resume"):
        rescore(run, dead, progress=False, max_attempts=1)
    done = _cli(str(run), "--url", dead, "--no-progress")
    assert done.returncode == 2 and "exists: --resume" in done.stderr
    assert not (run / "rescored.summary.json").exists()


def test_no_file_is_written_or_cut_through_a_link_or_taken_for_an_output(
        trainer_run: Path, loose: ServerProcess, tmp_path: Path) -> None:
    victim = tmp_path / "token"
    victim.write_bytes(b"secret-without-a-newline")
    dead = f"http://127.0.0.1:{free_port()}"
    link = tmp_path / "out.jsonl"
    link.symlink_to(victim)
    for resume in (False, True):
        with pytest.raises(SourceError):
            rescore(trainer_run, dead, link, progress=False, max_attempts=1, resume=resume)
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "made")
    with pytest.raises(SourceError):
        rescore(trainer_run, dead, dangling, progress=False, max_attempts=1)
    assert not (tmp_path / "made").exists()
    # resuming a file that is not rescore's: refused, not cut at its last newline
    with pytest.raises(SourceError, match="not a line rescore wrote"):
        rescore(trainer_run, dead, victim, progress=False, max_attempts=1, resume=True)
    assert victim.read_bytes() == b"secret-without-a-newline"
    summary = tmp_path / "s.json"
    summary.symlink_to(victim)
    done = _cli(str(trainer_run / FILE), "--url", loose.url, "--out",
                str(tmp_path / "new.jsonl"), "--summary", str(summary), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert victim.read_bytes() == b"secret-without-a-newline"  # the link was replaced
    assert not summary.is_symlink() and json.loads(summary.read_text())["items"] > 0


def test_stored_fields_of_the_wrong_type_are_named(tmp_path: Path) -> None:
    log = tmp_path / FILE
    log.write_text(json.dumps({"item": {"verifier": "math", "response": "1", "answer": "1"},
                               "reward": 1.0, "provenance": "v1"}) + "\n")
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SourceError, match=f"{FILE}:1: provenance"):
        rescore(log, dead, tmp_path / "o.jsonl", progress=False, max_attempts=1)
    assert not (tmp_path / "o.jsonl").exists()  # nothing scored: no output left to resume
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "completions.parquet"
    pq.write_table(pa.table({"completion": ["1"], "math/item": [json.dumps("not an item")],
                             "math": [1.0]}), table)
    with pytest.raises(SourceError, match="completions.parquet:0:math: math/item"):
        rescore(table, dead, tmp_path / "t.jsonl", progress=False, max_attempts=1)


GOOD = json.dumps({"item": {"verifier": "math", "answer": "2", "response": "\\boxed{2}"},
                   "reward": 1.0, "provenance": {"fingerprint": "f1"}})
SCORED = '{"item": {"verifier": "math", "answer": "2", "response": "x"}'


@pytest.mark.parametrize(("line", "options", "reason"), [
    (b"[" * 100_000 + b"]" * 100_000, (), "arrays and objects nested more than 500 deep"),
    (b'{"item": {"verifier": "math", "answer": "\xff"}}', (), "not UTF-8 (byte 0xff at "
     "offset 41)"),
    (f'{SCORED}, "reward": {"9" * 5000}}}'.encode(), (),
     "a number of more than 4300 characters"),
    (f'{SCORED}, "reward": {"9" * 400}}}'.encode(), (), "reward: a finite number, or null"),
    (f'{SCORED}, "reward": "1.0"}}'.encode(), (), "reward: a number, or null"),
    (f'{SCORED}, "step": 1e400}}'.encode(), (), "step: an integer, or null"),
    (f'{SCORED}, "provenance": {{"fingerprint": 1}}}}'.encode(), (),
     "provenance.fingerprint: a string (a digest), or null"),
    (f'{SCORED}, "provenance": {{"fingerprint": {{"a": 1}}}}}}'.encode(), (),
     "provenance.fingerprint: a string (a digest), or null"),
    (f'{SCORED}, "provenance": {{"libraries": ["sympy"]}}}}'.encode(), (),
     "provenance.libraries: an object (name: version), or null"),
    (f'{SCORED}, "pad": "{"x" * 2000}"}}'.encode(), ("--max-line-bytes", "1000"),
     "a line longer than 1000 bytes (max_line_bytes, --max-line-bytes)"),
], ids=["deep", "not-utf8", "5000-digits", "reward-400-digits", "reward-string", "step-inf",
        "fingerprint-int", "fingerprint-dict", "libraries-list", "line-too-long"])
def test_a_hostile_line_is_one_line_naming_it_and_exit_2(
        tmp_path: Path, line: bytes, options: tuple[str, ...], reason: str) -> None:
    """After a good line (read, batched, not yet sent), a line Python's parser, a float or
    the summary would fail on: one line naming file and line, exit 2, nothing sent or kept."""
    log = tmp_path / FILE
    log.write_bytes(GOOD.encode() + b"\n" + line + b"\n")
    done = _cli(str(log), "--url", f"http://127.0.0.1:{free_port()}", "--retry-for-s", "0.5",
                "--no-progress", *options)
    assert (done.returncode, done.stderr.splitlines()) == (
        2, [f"reward-rescore: {FILE}:2: {reason}"])
    assert not (tmp_path / "rollouts.rescored.jsonl").exists()


def _bounded(*args: str) -> subprocess.CompletedProcess[str]:
    """``_cli`` in 1 GiB of address space: a read without a bound ends in MemoryError."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run([sys.executable, "-m", "reward_server.rescore", *args],
                          capture_output=True, text=True, timeout=120, preexec_fn=limit)


def test_files_that_never_end_are_refused_and_lines_read_only_to_the_limit(
        tmp_path: Path) -> None:
    import os

    dead = f"http://127.0.0.1:{free_port()}"
    for name, make in [("zero", lambda p: p.symlink_to("/dev/zero")), ("fifo", os.mkfifo)]:
        run = tmp_path / name
        run.mkdir()
        make(run / FILE)
        done = _bounded(str(run), "--url", dead, "--retry-for-s", "0.5", "--no-progress")
        assert (done.returncode, done.stderr.splitlines()) == (2, [
            f"reward-rescore: {run / FILE}: not a regular file (a FIFO waits for a writer, "
            "a device may never end)"])
    # a regular file of one 4 GiB line (sparse): read to the default 64 MiB, no further
    sparse = tmp_path / "sparse.jsonl"
    sparse.write_bytes(GOOD.encode() + b"\n")
    with open(sparse, "ab") as f:
        f.truncate(4 << 30)
    done = _bounded(str(sparse), "--url", dead, "--retry-for-s", "0.5", "--no-progress")
    assert (done.returncode, done.stderr.splitlines()) == (2, [
        "reward-rescore: sparse.jsonl:2: a line longer than 67108864 bytes "
        "(max_line_bytes, --max-line-bytes)"])
    # the progress bar's count reads no further either
    with pytest.raises(SourceError, match="sparse.jsonl:2: a line longer than 1000 bytes"):
        rescore(sparse, dead, tmp_path / "o.jsonl", progress=True, max_attempts=1,
                max_line_bytes=1000)


def test_a_resumed_output_with_fingerprints_of_other_types_is_summarised(
        tmp_path: Path) -> None:
    """An output an older version wrote from such lines (a fingerprint 1, then "f1") is
    summarised on --resume, the odd one as malformed: it used to fail in sorting, after all
    the scoring and on every resume after."""
    log = tmp_path / FILE
    log.write_text(GOOD + "\n" + GOOD + "\n")
    out = tmp_path / "out.jsonl"
    written = [{"origin": f"{FILE}:{n}", "step": None, "item": json.loads(GOOD)["item"],
                "reward": 1.0, "result": {"status": "ok"}, "provenance": {"fingerprint": "f2"},
                "previous": {"reward": 1.0, "result": {}, "provenance": {"fingerprint": old}}}
               for n, old in [(1, 1), (2, "f1")]]
    out.write_text("".join(json.dumps(w) + "\n" for w in written))
    dead = f"http://127.0.0.1:{free_port()}"
    summary = rescore(log, dead, out, progress=False, max_attempts=1, resume=True)
    assert summary["provenance"]["math"]["before"] == ["f1", "malformed"]
    assert summary["items"] == 2
