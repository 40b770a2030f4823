"""The engine checks the suite runs before Docker tests: a wedged engine (its ping answered,
/info not) has its goroutines dumped and digested, is stopped, killed if SIGTERM does not
end it, and restarted, in CI only; one that keeps wedging is given up on. Against a
stand-in dockerd on a unix socket (tests/helpers/fake_dockerd.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import engine_checks
from sandbox.engine_checks import Revival, dump_and_stop, engine_answers, engine_serves
from tests.helpers import fake_dockerd


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    fresh: list[str] = []
    monkeypatch.setattr(engine_checks, "EVENTS", fresh)
    return fresh


@pytest.fixture
def paths(tmp_path: Path) -> Iterator[list[str]]:
    (tmp_path / "stacks").mkdir()
    names = [str(tmp_path / "docker.sock"), str(tmp_path / "stacks"), str(tmp_path / "pid")]
    yield names
    try:  # whichever stand-in the test left running
        os.kill(int(Path(names[2]).read_text()), 9)
    except (OSError, ValueError):
        pass


def _pid(paths: list[str]) -> int:
    return int(Path(paths[2]).read_text())


def _gone(pid: int) -> bool:
    return not engine_checks._alive(pid)


def test_the_stand_in_answers_as_a_serving_or_a_wedged_engine(paths: list[str]) -> None:
    fake_dockerd.start([*paths, "serving"])
    assert engine_answers(Path(paths[0])) and engine_serves(Path(paths[0]), 5)
    os.kill(_pid(paths), 9)
    fake_dockerd.start(paths)
    assert engine_answers(Path(paths[0])) and not engine_serves(Path(paths[0]), 1)


def test_a_wedged_main_engine_is_dumped_stopped_and_restarted_in_ci(
        paths: list[str], events: list[str]) -> None:
    from tests.conftest import ensure_main_engine

    fake_dockerd.start(paths)
    wedged = _pid(paths)
    restart = [sys.executable, "-m", "tests.helpers.fake_dockerd", "--start", *paths,
               "serving"]
    revival = Revival("the Docker engine")
    ensure_main_engine(Path(paths[0]), restart, revival, Path(paths[2]), Path(paths[1]),
                       may_stop=True, serve_timeout_s=1)
    assert _gone(wedged)
    assert _pid(paths) != wedged and engine_serves(Path(paths[0]), 5)
    assert events[0] == f"dockerd (pid {wedged}) answered its ping but not /info within 1 s"
    kept = Path(events[1].removeprefix("its goroutines: "))
    assert kept.read_text() == fake_dockerd.DUMP
    kept.unlink()
    assert events[2:4] == [
        "  2 x [semacquire] API request: github.com/docker/docker/daemon.(*Daemon).SystemInfo",
        "  1 x [chan receive] main.main"]  # the fresh IO wait is no part of a wedge
    assert events[4].startswith("the Docker engine: restarted")
    ensure_main_engine(Path(paths[0]), restart, revival, Path(paths[2]), Path(paths[1]),
                       may_stop=True, serve_timeout_s=1)  # it serves: nothing more done
    assert revival.starts == 1 and len(events) == 5


def test_a_developers_wedged_engine_is_left_to_them(paths: list[str], events: list[str]
                                                    ) -> None:
    from tests.conftest import ensure_main_engine

    fake_dockerd.start(paths)
    marks = Path(paths[1]) / "restarted"
    with pytest.raises(pytest.fail.Exception, match=r"not /info within 1 s \(wedged\); "
                                                    "restart the engine"):
        ensure_main_engine(Path(paths[0]), ["touch", str(marks)], Revival("the engine"),
                           Path(paths[2]), Path(paths[1]), may_stop=False, serve_timeout_s=1)
    assert not _gone(_pid(paths)) and not marks.exists() and events == []


def test_a_dockerd_that_outlives_sigterm_is_killed_with_its_children(paths: list[str],
                                                                     tmp_path: Path) -> None:
    proc = fake_dockerd.start([*paths, "--ignore-term"])
    said = dump_and_stop(proc.pid, Path(paths[1]), tmp_path / "kept.log", term_wait_s=1)
    assert _gone(proc.pid)
    assert said[-1] == "it did not stop on SIGTERM: killed"
    assert (tmp_path / "kept.log").read_text() == fake_dockerd.DUMP


def test_a_dockerd_that_writes_no_dump_is_still_stopped(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "600"])  # SIGUSR1 ends it, as it would no dump
    said = dump_and_stop(sleeper.pid, tmp_path / "none", tmp_path / "kept.log",
                         dump_wait_s=1, term_wait_s=1)
    sleeper.wait(timeout=10)
    assert "it wrote no goroutine dump" in said and not (tmp_path / "kept.log").exists()


def test_an_engine_that_keeps_wedging_is_given_up_on_after_three_restarts() -> None:
    serving = [False]
    starts: list[int] = []

    def start() -> None:
        starts.append(1)
        serving[0] = True

    revival = Revival("the engine", max_starts=3)
    for _ in range(3):
        serving[0] = False  # wedged again since
        revival.ensure(lambda: serving[0], start)
    serving[0] = False
    for _ in range(2):
        with pytest.raises(RuntimeError, match="stopped serving again after 3 restarts"):
            revival.ensure(lambda: serving[0], start)
    assert len(starts) == 3


def test_the_digest_counts_long_waits_by_the_programs_own_frame() -> None:
    assert engine_checks.stack_digest(fake_dockerd.DUMP) == [
        "2 x [semacquire] API request: github.com/docker/docker/daemon.(*Daemon).SystemInfo",
        "1 x [chan receive] main.main"]
    assert engine_checks.stack_digest("not a dump") == []
