"""The engine process's edges as the trainer sees them: how it is started, what it leaves in
shared memory, how it fails. No vLLM: a stand-in engine process speaks the wire protocol
(trainer/engine/wire.py), so these run in seconds in the trainer's own environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from trainer.engine import client
from trainer.engine.client import EngineError, EngineSettings, VLLMEngine
from trainer.engine.weights import policy_weights
from trainer.models import tiny_model, tiny_tokenizer

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]

# A stand-in for trainer.engine.vllm_process: reads the settings, says it started, and
# answers every request; run as ``python -P -m trainer.engine.vllm_process --fd N``.
_FAKE_ENGINE = textwrap.dedent("""
    import sys
    from trainer.engine import wire
    connection = wire.Channel(int(sys.argv[sys.argv.index("--fd") + 1]))
    connection.recv()
    connection.send({"ok": True})
    while True:
        try:
            request = connection.recv()
        except EOFError:
            sys.exit(0)
        # a load (the client's check of the start's weights among them) took every weight
        connection.send({"ok": True, "value": {"weights": 1, "not_loaded": [],
                                               "not_updated": []}
                         if request["op"] == "load_weights" else 0})
        if request["op"] == "close":
            sys.exit(0)
""")


# where a stand-in built from it does something else before it answers
_ANSWER = "    # a load (the client's check"
assert _ANSWER in _FAKE_ENGINE


def fake_python(tmp_path: Path) -> Path:
    """An executable that runs the stand-in engine, as ``vllm_python``."""
    script = tmp_path / "fake_engine.py"
    script.write_text(_FAKE_ENGINE)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    return python


def tiny_engine(python: Path) -> VLLMEngine:
    model = tiny_model(tiny_tokenizer(), heads=2)
    with policy_weights(model) as weights:
        return VLLMEngine(model, EngineSettings(python=python, start_timeout_s=60), weights)


@pytest.fixture()
def shared_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of its own standing in for /dev/shm."""
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setattr(client, "_SHARED_MEMORY", shm)
    return shm


def test_a_killed_trainer_leaves_no_copy_of_the_weights_in_shared_memory(
        tmp_path: Path) -> None:
    """A trainer that is killed (SIGKILL, the OOM killer) runs no cleanup: a copy of the
    weights it still held in /dev/shm would stay there, the model's size in memory, for
    good. Once the engine has started, it holds none."""
    shm = tmp_path / "shm"
    shm.mkdir()
    parent = tmp_path / "parent.py"
    parent.write_text(textwrap.dedent(f"""
        import time
        from pathlib import Path
        from trainer.engine import client
        client._SHARED_MEMORY = Path({str(shm)!r})
        from tests.trainer.test_engine_process import tiny_engine
        engine = tiny_engine(Path({str(fake_python(tmp_path))!r}))
        print("started", flush=True)
        time.sleep(600)
    """))
    process = subprocess.Popen([sys.executable, str(parent)], stdout=subprocess.PIPE,
                               cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == b"started\n"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    left = [p.relative_to(shm) for p in shm.rglob("*.safetensors")]
    assert left == [], f"left in shared memory after the trainer was killed: {left}"


def test_a_gone_trainers_copies_are_deleted_by_the_next_start(tmp_path: Path,
                                                               shared_memory: Path) -> None:
    """What a trainer killed mid-start or mid-sync left goes when the next engine starts;
    a live trainer's copies and others' files stay."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead_folder = shared_memory / f"vllm-engine-{gone.pid}-abc"
    dead_folder.mkdir()
    (dead_folder / "model.safetensors").write_bytes(b"x" * 1024)
    dead_file = shared_memory / f"vllm-engine-{gone.pid}-def.safetensors"
    dead_file.write_bytes(b"x")
    other = shared_memory / "someone-elses-file"
    other.write_bytes(b"x")
    with client.StagedWeights({"w": torch.zeros(4)}) as live:
        engine = tiny_engine(fake_python(tmp_path))
        engine.close()
        assert Path(live.path).exists()
    assert not dead_folder.exists() and not dead_file.exists()
    assert other.exists()


def test_an_earlier_versions_live_copy_stays(tmp_path: Path, shared_memory: Path) -> None:
    """A trainer of the version before copies to a plain file and holds no lock on it: a
    new trainer's start beside it (one machine, two checkouts) deleted it mid-run, and the
    old one's next sync failed. A plain file goes only when the pid in its name is gone."""
    live = shared_memory / f"vllm-engine-{os.getpid()}-old.safetensors"
    live.write_bytes(b"x" * 1024)
    engine = tiny_engine(fake_python(tmp_path))
    engine.close()
    assert live.exists()


def test_a_live_trainers_copies_stay_whatever_its_pid_says_here(tmp_path: Path,
                                                                shared_memory: Path) -> None:
    """/dev/shm shared across PID namespaces (docker --ipc=host, a pod's memory-backed
    emptyDir): a live trainer in another namespace has a pid that is no process here, or
    another one. Its lock says it lives; a copy without one is a dead trainer's."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    elsewhere = shared_memory / f"vllm-engine-{gone.pid}-abc"  # its pid in its namespace
    elsewhere.mkdir()
    (elsewhere / "model.safetensors").write_bytes(b"x" * 1024)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys\n"
         f"fd = os.open({str(elsewhere)!r}, os.O_RDONLY)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('locked', flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        tiny_engine(fake_python(tmp_path)).close()
        assert (elsewhere / "model.safetensors").exists()
    finally:
        holder.kill()  # the kernel drops its lock: now it is a dead trainer's
        holder.wait()
    tiny_engine(fake_python(tmp_path)).close()
    assert not elsewhere.exists()


def test_a_copy_that_cannot_be_written_is_one_engine_error_leaving_nothing_open(
        tmp_path: Path) -> None:
    """A /dev/shm with no room for even the model's config is an EngineError naming
    --shm-size, as a full one for the weights is: no traceback, no log handle left open,
    nothing left in shared memory."""
    shm, log = tmp_path / "shm", tmp_path / "run" / "vllm_engine.log"
    shm.mkdir()
    probe = textwrap.dedent(f"""
        import os, resource, signal
        from pathlib import Path
        from trainer.engine import client
        from trainer.engine.client import EngineError, EngineSettings, VLLMEngine
        from trainer.engine.weights import policy_weights
        from trainer.models import tiny_model, tiny_tokenizer
        client._SHARED_MEMORY = Path({str(shm)!r})
        model = tiny_model(tiny_tokenizer(), heads=2)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))  # not even config.json fits
        try:
            with policy_weights(model) as weights:
                VLLMEngine(model, EngineSettings(python=Path({str(fake_python(tmp_path))!r}),
                                                 log_path=Path({str(log)!r})), weights)
        except EngineError as exc:
            print("EngineError", "shm-size" in str(exc))
        except Exception as exc:
            print(type(exc).__name__)
        held = []
        for fd in os.listdir("/proc/self/fd"):  # one of them was listdir's own
            try:
                held.append(os.readlink(f"/proc/self/fd/{{fd}}"))
            except OSError:
                pass
        print("open", {str(log)!r} in held)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    assert out.stdout.split("\n")[:2] == ["EngineError True", "open False"], out.stdout
    assert list(shm.iterdir()) == []


def test_ctrl_c_reaches_the_trainer_not_the_engine_process(tmp_path: Path) -> None:
    """Ctrl-C signals the terminal's whole foreground process group: an engine in the
    trainer's group would print vLLM's KeyboardInterrupt traceback and die under the
    trainer's next request. The trainer ends its engine itself."""
    engine = tiny_engine(fake_python(tmp_path))
    try:
        assert os.getpgid(engine._process.pid) != os.getpgid(0)
    finally:
        engine.close()


def test_shared_memory_that_is_full_is_an_engine_error(tmp_path: Path) -> None:
    """A /dev/shm too small for a copy of the weights (Docker gives a container 64 MB) is
    an EngineError saying so: the trainer stops with a checkpoint and one line, not
    safetensors' traceback."""
    probe = textwrap.dedent("""
        import resource, signal, torch
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # a full /dev/shm
        from trainer.engine.client import EngineError, StagedWeights
        try:
            StagedWeights({"w": torch.zeros(1 << 20)})
        except EngineError as exc:
            print("EngineError", "shm-size" in str(exc))
        except Exception as exc:
            print(type(exc).__name__)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, check=True)
    assert out.stdout.strip() == "EngineError True"


@pytest.mark.parametrize("python", ["folder", "not_executable", "exits_at_once"])
def test_a_wrong_vllm_python_is_one_engine_error(tmp_path: Path, python: str,
                                                 shared_memory: Path) -> None:
    """``vllm_python`` that is a folder, a file that is not a program, or a Python that
    exits before reading its settings (a Python 3.10 environment has no ``-P``) is an
    EngineError naming what to do, which the CLI prints as one line; and nothing of it
    stays in shared memory."""
    path = tmp_path / python
    if python == "folder":
        path.mkdir()
    else:
        path.write_text("#!/bin/sh\necho 'Unknown option: -P' >&2\nexit 2\n")
        path.chmod(0o755 if python == "exits_at_once" else 0o644)
    with pytest.raises(EngineError, match="rollout_engine: hf"):
        tiny_engine(path)
    assert list(shared_memory.iterdir()) == []


def test_the_engine_is_told_to_keep_its_core_in_its_own_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each draw seeds the engine process's generator; with the engine core moved to a
    process of its own (VLLM_ENABLE_V1_MULTIPROCESSING=1 in the user's environment), the
    seed would not reach its sampler and rollouts would stop following from the run's."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    seen = tmp_path / "env"
    python = tmp_path / "python"
    script = tmp_path / "fake_engine.py"
    script.write_text(_FAKE_ENGINE)
    python.write_text(f"#!/bin/sh\necho $VLLM_ENABLE_V1_MULTIPROCESSING > {seen}\n"
                      f"exec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    tiny_engine(python).close()
    assert seen.read_text().strip() == "0"


def test_the_engine_process_sees_none_of_the_trainers_packages(tmp_path: Path) -> None:
    """Its PYTHONPATH holds the engine's own two modules and nothing else: where the
    trainer is installed (not editable) the folder above trainer/ is the trainer's
    site-packages, whose transformers (>= 5.20) and torch would shadow vLLM's pins."""
    seen = tmp_path / "pythonpath"
    script = tmp_path / "fake_engine.py"
    script.write_text(_FAKE_ENGINE)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nfind \"$PYTHONPATH\" -type f | sed \"s|^$PYTHONPATH/||\" "
                      f"| sort > {seen}\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    tiny_engine(python).close()
    assert seen.read_text().split() == [
        "trainer/__init__.py", "trainer/engine/__init__.py", "trainer/engine/vllm_process.py",
        "trainer/engine/wire.py"]


def stuck_python(tmp_path: Path) -> Path:
    """A stand-in engine that touches ``generating`` and then never answers a draw."""
    script = tmp_path / "stuck_engine.py"
    stuck = _FAKE_ENGINE.replace(_ANSWER,
                                 '    if request["op"] == "generate":\n'
                                 f'        open({str(tmp_path / "generating")!r}, "w").close()\n'
                                 '        time.sleep(600)\n' + _ANSWER)
    assert stuck != _FAKE_ENGINE
    script.write_text(stuck.replace("import sys", "import sys, time"))
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    return python


def test_an_engine_that_stops_answering_is_an_engine_error(tmp_path: Path) -> None:
    """An engine process that is alive but stuck (a request it never answers) would hang
    the run: past ``request_timeout_s`` the request is an EngineError naming the setting
    (the run then stops with a checkpoint), and the process is ended."""
    model = tiny_model(tiny_tokenizer(), heads=2)
    with policy_weights(model) as weights:
        engine = VLLMEngine(model, EngineSettings(python=stuck_python(tmp_path),
                                                  start_timeout_s=60,
                                                  request_timeout_s=2), weights)
    with pytest.raises(EngineError, match="vllm_request_timeout_s"):
        engine.generate([[1, 2]], n=1, max_tokens=2, stop_token_ids=[])
    assert engine._process.poll() is not None
    engine.close()


def test_a_context_longer_than_the_model_is_refused_before_the_engine_starts(
        tmp_path: Path) -> None:
    """vLLM refuses a max_model_len beyond the model's positions in three lines that name
    its own environment override (which it says can give NaNs); the trainer names its
    settings instead, before starting anything."""
    from trainer.config import GRPOConfig, RewardSpec
    from trainer.engine.colocated import ColocatedEngine

    model = tiny_model(tiny_tokenizer(), heads=2)
    limit = model.config.max_position_embeddings
    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path / "run"),
                        rewards=[RewardSpec(verifier="local")], rollout_engine="vllm",
                        vllm_python=str(fake_python(tmp_path)), max_prompt_length=limit,
                        max_completion_length=8)
    with pytest.raises(EngineError, match="max_prompt_length \\+ max_completion_length"):
        ColocatedEngine.start(config, 0, torch.float32, model, tiny_tokenizer(), [1])


def test_the_engines_output_goes_to_its_log_not_the_trainers_terminal(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """vLLM writes pages at every start (and a warning per request here), over the
    trainer's progress and its one-line errors; with ``log_path`` all of it goes there,
    both streams, and a second engine of the run adds to the file."""
    script = tmp_path / "chatty_engine.py"
    script.write_text("import sys\nprint('INFO vllm says hello', flush=True)\n"
                      "print('WARNING from stderr', file=sys.stderr, flush=True)\n"
                      + _FAKE_ENGINE)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    log = tmp_path / "run" / "vllm_engine.log"
    model = tiny_model(tiny_tokenizer(), heads=2)
    for _ in range(2):
        with policy_weights(model) as weights:
            VLLMEngine(model, EngineSettings(python=python, start_timeout_s=60, log_path=log),
                       weights).close()
    out, err = capfd.readouterr()
    assert "vllm says hello" not in out + err and "from stderr" not in out + err
    assert log.read_text().count("INFO vllm says hello") == 2
    assert log.read_text().count("WARNING from stderr") == 2


def test_an_engine_that_dies_is_one_line_with_its_log_and_last_words(tmp_path: Path) -> None:
    """An engine that exits mid-run (killed, or vLLM's own error) stops the run with one
    line: it names the log and quotes its last lines, so the cause shows without a
    search through a log the terminal no longer holds."""
    script = tmp_path / "dying_engine.py"
    dying = _FAKE_ENGINE.replace(_ANSWER,
                                 '    if request["op"] == "generate":\n'
                                 '        print("x" * 5000)\n'
                                 '        print("RuntimeError: out of KV cache blocks",'
                                 ' flush=True)\n'
                                 '        sys.exit(3)\n' + _ANSWER)
    assert dying != _FAKE_ENGINE
    script.write_text(dying)
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    log = tmp_path / "vllm_engine.log"
    model = tiny_model(tiny_tokenizer(), heads=2)
    with policy_weights(model) as weights:
        engine = VLLMEngine(model, EngineSettings(python=python, start_timeout_s=60,
                                                  log_path=log), weights)
    with pytest.raises(EngineError) as error:
        engine.generate([[1, 2]], n=1, max_tokens=2, stop_token_ids=[])
    message = str(error.value)
    assert "\n" not in message
    assert str(log) in message and "RuntimeError: out of KV cache blocks" in message
    assert len(message) < 800  # the 5000-character line is cut, not pasted whole
    engine.close()


def test_a_runs_engines_log_in_its_output_folder_one_per_rank(tmp_path: Path) -> None:
    """Each rank's engine writes a file of its own in the run's folder: two engines'
    lines interleaved in one file could not be told apart."""
    from trainer.config import GRPOConfig, RewardSpec
    from trainer.engine.colocated import engine_settings

    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path / "run"),
                        rewards=[RewardSpec(verifier="local")], rollout_engine="vllm")
    logs = {engine_settings(config, 0, torch.float32, rank).log_path for rank in (0, 1)}
    assert logs == {tmp_path / "run" / "vllm_engine.log",
                    tmp_path / "run" / "vllm_engine-rank1.log"}


def test_a_log_that_cannot_be_written_is_one_engine_error_leaving_nothing(
        tmp_path: Path, shared_memory: Path) -> None:
    """An output_dir the engine's log cannot go to (a file where its folder should be) is
    said before anything starts, and no copy of the weights is left in shared memory."""
    blocker = tmp_path / "run"
    blocker.write_text("a file, not a folder")
    model = tiny_model(tiny_tokenizer(), heads=2)
    with pytest.raises(EngineError, match="output_dir is writable"), \
            policy_weights(model) as weights:
        VLLMEngine(model, EngineSettings(python=fake_python(tmp_path), start_timeout_s=60,
                                         log_path=blocker / "vllm_engine.log"), weights)
    assert list(shared_memory.iterdir()) == []


def _engine_script(tmp_path: Path, name: str, on_request: str) -> Path:
    """A ``vllm_python`` running the stand-in engine with ``on_request`` (code indented
    into its loop, before its answer) run at every request."""
    body = textwrap.indent(textwrap.dedent(on_request).strip(), "    ")
    script_text = _FAKE_ENGINE.replace(_ANSWER, body + "\n" + _ANSWER)
    assert script_text != _FAKE_ENGINE
    script = tmp_path / f"{name}.py"
    script.write_text(script_text)
    python = tmp_path / name
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    python.chmod(0o755)
    return python


def _start(python: Path, log: Path | None = None, start_timeout_s: float = 60) -> VLLMEngine:
    model = tiny_model(tiny_tokenizer(), heads=2)
    with policy_weights(model) as weights:
        return VLLMEngine(model, EngineSettings(python=python, start_timeout_s=start_timeout_s,
                                                log_path=log), weights)


def test_an_engine_that_dies_silently_is_not_blamed_on_the_last_ones_words(
        tmp_path: Path) -> None:
    """A resumed run appends to the engine's log: an engine that dies at its start
    without a word is said to have written nothing, not quoted with the lines of the
    engine before it; and its log is named once."""
    log = tmp_path / "run" / "vllm_engine.log"
    chatty = tmp_path / "chatty"
    chatty.write_text(f"#!/bin/sh\necho 'RuntimeError: the earlier engine ran out'\n"
                      f"exec {fake_python(tmp_path)} \"$@\"\n")
    chatty.chmod(0o755)
    _start(chatty, log).close()
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 1\n")
    silent.chmod(0o755)
    with pytest.raises(EngineError) as error:
        _start(silent, log)
    message = str(error.value)
    assert "earlier engine" not in message, message
    assert message.count(str(log)) == 1, message
    assert "wrote nothing" in message


def test_an_engines_last_words_are_quoted_not_obeyed_by_the_terminal(tmp_path: Path) -> None:
    """The engine's lines quoted in the trainer's error lose what a terminal would act on:
    an escape that erases the line and a carriage return could put forged words in the
    place of the error."""
    python = _engine_script(tmp_path, "forging", r"""
        if request["op"] == "generate":
            print("\x1b[2K\rgrpo-train: finished, all good\x07", flush=True)
            sys.exit(3)
    """)
    log = tmp_path / "vllm_engine.log"
    engine = _start(python, log)
    with pytest.raises(EngineError) as error:
        engine.generate([[1, 2]], n=1, max_tokens=2, stop_token_ids=[])
    engine.close()
    message = str(error.value)
    assert message.isprintable(), repr(message)
    assert str(log) in message and "exited (3)" in message


def test_a_request_the_engine_fails_is_one_line_and_the_rest_is_kept(tmp_path: Path) -> None:
    """vLLM's errors run to several lines (a CUDA error is four): the trainer's message
    keeps the first; the whole text stays in the error's detail, for the run's
    engine_error.log."""
    python = _engine_script(tmp_path, "failing", """
        if request["op"] == "generate":
            connection.send({"ok": False, "error": "RuntimeError: CUDA error: an illegal "
                             "memory access\\nCUDA kernel errors might be reported later"
                             "\\nFor debugging consider CUDA_LAUNCH_BLOCKING=1"
                             "\\nCompile with TORCH_USE_CUDA_DSA"})
            continue
    """)
    engine = _start(python)
    try:
        with pytest.raises(EngineError) as error:
            engine.generate([[1, 2]], n=1, max_tokens=2, stop_token_ids=[])
    finally:
        engine.close()
    assert str(error.value) == "vLLM engine: RuntimeError: CUDA error: an illegal memory access"
    assert "TORCH_USE_CUDA_DSA" in error.value.detail


def test_an_engine_that_does_not_start_in_time_names_the_setting(tmp_path: Path) -> None:
    """An engine that never says it started is ended past the start timeout, and the run
    stops with the setting that gives it longer (not the dtype: nothing says it is wrong)."""
    from trainer.config import GRPOConfig, RewardSpec
    from trainer.engine.colocated import engine_settings

    config = GRPOConfig(model="tiny", dataset="unused", output_dir=str(tmp_path / "run"),
                        rewards=[RewardSpec(verifier="local")], rollout_engine="vllm",
                        vllm_start_timeout_s=2)
    settings = engine_settings(config, 0, torch.float32)
    assert settings.start_timeout_s == 2
    stuck = tmp_path / "stuck"
    stuck.write_text("#!/bin/sh\nexec sleep 600\n")
    stuck.chmod(0o755)
    with pytest.raises(EngineError) as error:
        _start(stuck, start_timeout_s=settings.start_timeout_s)
    message = str(error.value)
    assert "vllm_start_timeout_s" in message and "vllm_dtype" not in message, message


def ended(pid: int) -> bool:
    """Whether ``pid`` has ended, waiting for it to (a zombie has: its adopter reaps it)."""
    import psutil

    for _ in range(300):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def test_an_interrupted_trainer_ends_its_engine_mid_request_without_waiting(
        tmp_path: Path, shared_memory: Path) -> None:
    """Ctrl-C while the engine draws: asked to close, the engine would first finish the
    draw (up to vllm_request_timeout_s). ``close(wait=False)`` ends it in the middle of
    it; the request in flight fails as an engine that exited."""
    engine = tiny_engine(stuck_python(tmp_path))
    failures: list[BaseException] = []

    def draw() -> None:
        try:
            engine.generate([[1, 2]], n=1, max_tokens=2, stop_token_ids=[])
        except EngineError as exc:
            failures.append(exc)

    drawing = threading.Thread(target=draw)
    drawing.start()
    try:
        while not (tmp_path / "generating").exists():
            time.sleep(0.05)
        engine.close(wait=False)
        assert engine._process.poll() is not None
        drawing.join()
        assert len(failures) == 1 and "exited" in str(failures[0])
        assert list(shared_memory.iterdir()) == []
    finally:
        engine._process.kill()
        engine.close()


def test_the_engine_never_outlives_its_trainer(tmp_path: Path) -> None:
    """A trainer killed in the middle of a draw (SIGKILL, the OOM killer, a second Ctrl-C
    in its cleanup) runs no cleanup: its engine, busy, never reads the closed connection,
    and ran on, adopted, holding its memory. The kernel ends it with the trainer."""
    parent = tmp_path / "parent.py"
    parent.write_text(textwrap.dedent(f"""
        from pathlib import Path
        from tests.trainer.test_engine_process import tiny_engine
        engine = tiny_engine(Path({str(stuck_python(tmp_path))!r}))
        print(engine._process.pid, flush=True)
        engine.generate([[1, 2]], n=1, max_tokens=2, stop_token_ids=[])
    """))
    process = subprocess.Popen([sys.executable, str(parent)], stdout=subprocess.PIPE,
                               cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert process.stdout is not None
    engine = int(process.stdout.readline())
    try:
        while not (tmp_path / "generating").exists():
            time.sleep(0.05)
        process.kill()
        process.wait()
        assert ended(engine)
    finally:
        if not ended(engine):
            os.kill(engine, signal.SIGKILL)


def test_shared_memory_where_no_copy_can_be_made_is_one_engine_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A /dev/shm no folder can be made in (read-only, out of inodes: here /proc, where not
    even root can) is the --shm-size error, not a traceback, and the log is let go."""
    monkeypatch.setattr(client, "_SHARED_MEMORY", Path("/proc/self/fdinfo"))
    log = tmp_path / "vllm_engine.log"
    model = tiny_model(tiny_tokenizer(), heads=2)
    opened = set(os.listdir("/proc/self/fd"))
    with pytest.raises(EngineError, match="could not write a copy of the weights"):
        with policy_weights(model) as weights:
            VLLMEngine(model, EngineSettings(python=fake_python(tmp_path), log_path=log),
                       weights)
    left = {os.readlink(f"/proc/self/fd/{fd}") for fd in
            set(os.listdir("/proc/self/fd")) - opened if os.path.exists(f"/proc/self/fd/{fd}")}
    assert str(log) not in left
