"""The second Docker engine the gVisor tests share: one that stopped answering, or wedged, is
brought back before the next test, and one that cannot come back fails the rest at once."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sandbox import engine_checks
from sandbox.testing import IMAGE, ExtraEngine


def test_a_stopped_engine_is_restarted_with_its_image(stoppable_engine: ExtraEngine) -> None:
    assert stoppable_engine.answers()
    stoppable_engine.stop()
    assert not stoppable_engine.answers()
    stoppable_engine.ensure_running()
    assert stoppable_engine.answers()
    assert stoppable_engine.docker("image", "inspect", IMAGE).returncode == 0


def test_a_wedged_engine_is_dumped_stopped_and_restarted(stoppable_engine: ExtraEngine,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """A real dockerd whose containerd is stopped (SIGSTOP) answers its ping and hangs on
    /info, as the main engine once did mid-run in CI: the check dumps its goroutines (the
    /info requests waiting on containerd), stops it with its containerd (whose zombie's pid
    file would stall the next start) and starts it again, with its image."""
    events: list[str] = []
    monkeypatch.setattr(engine_checks, "EVENTS", events)
    monkeypatch.setattr(stoppable_engine, "serve_timeout_s", 10)
    assert stoppable_engine.proc is not None
    wedged = stoppable_engine.proc.pid
    os.kill(stoppable_engine.containerd_pid(), signal.SIGSTOP)
    assert not stoppable_engine.answers()
    stoppable_engine.ensure_running()
    assert stoppable_engine.answers() and stoppable_engine.proc.pid != wedged
    assert stoppable_engine.docker("image", "inspect", IMAGE).returncode == 0
    assert events[0] == f"dockerd (pid {wedged}) answered its ping but not /info within 10 s"
    kept = Path(events[1].removeprefix("its goroutines: "))
    assert "goroutine" in kept.read_text()
    kept.unlink()
    assert any("API request: github.com/docker/docker/libcontainerd/remote.(*client).Version"
               in line for line in events), events


def test_an_engine_that_cannot_restart_fails_every_later_caller_without_retrying(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = ExtraEngine(tmp_path)  # never started: it does not answer
    starts: list[int] = []

    def start_fails() -> None:
        starts.append(1)
        raise RuntimeError("second dockerd did not start: address in use")

    monkeypatch.setattr(engine, "start", start_fails)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="did not restart: second dockerd did not start"):
            engine.ensure_running()
    assert starts == [1]


def test_a_main_engine_that_does_not_come_back_fails_every_later_test_at_once(
        tmp_path: Path) -> None:
    """The main engine's check: a socket nothing answers on is restarted once (here by a
    command that does nothing), and after that every caller fails at once, restarting
    nothing, instead of each test waiting out its sandbox timeout."""
    from sandbox.testing import Revival
    from tests.conftest import ensure_main_engine

    marks = tmp_path / "restarts"
    restart = ("sh", "-c", f"echo restarted >> {marks}; echo 'dockerd did not come up' >&2; "
                           "exit 1")
    revival = Revival("the Docker engine")
    for _ in range(3):
        with pytest.raises(pytest.fail.Exception, match="did not restart: dockerd did not"):
            ensure_main_engine(tmp_path / "docker.sock", restart, revival)
    assert marks.read_text().splitlines() == ["restarted"]


def test_a_runtimes_settings_are_read_only_once_its_engine_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module's server takes its runtime's settings before any test of the module runs:
    a gVisor engine that cannot come back fails the module there, at once, rather than
    after the server waits minutes for a sandbox."""
    from tests.conftest import SandboxRuntime

    engine = ExtraEngine(tmp_path)

    def start_fails() -> None:
        raise RuntimeError("second dockerd did not start")

    monkeypatch.setattr(engine, "start", start_fails)
    runtime = SandboxRuntime("runsc", engine.host, engine.ensure_running)
    with pytest.raises(RuntimeError, match="did not restart"):
        runtime.env  # noqa: B018 - the read is the check
    assert SandboxRuntime("runc").env == {}
