"""The harness's ``fetch_files`` and the response limit, as units: paths resolved inside the
work dir without following a link anywhere on them, only regular files read, by a child under
the candidate's uid when the harness is root; the streams and files cut to the limit in the
container, and again on the host by their size as JSON. The same through the real server and
engine: tests/reward_server/run_code/test_run_code_bounds.py."""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.harness import slate
from sandbox.harness.fetch import Refused, fetch_files, open_inside
from sandbox.harness.snippet import reply
from sandbox.response_limit import fit_json, json_size, text_within
from sandbox.snippets import Limits, _parse


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A work dir as the harness makes one: the candidate's when we are root."""
    path = Path(tempfile.mkdtemp(prefix="fetch-"))
    path.chmod(0o755)
    (path / "real").mkdir()
    (path / "real" / "f.txt").write_bytes(b"inside")
    (path / "top.txt").write_bytes(b"top")
    (path / "locked.txt").write_bytes(b"secret")
    os.symlink("/proc/self", path / "p")
    os.symlink("real", path / "link")
    os.symlink("/proc/self/maps", path / "maps")
    os.symlink("/etc/hostname", path / "out.txt")
    (path / "real" / "q").symlink_to("/proc/self")
    os.mkfifo(path / "fifo")
    if slate.isolated():
        for top, dirs, names in os.walk(path):
            for name in [top, *(os.path.join(top, n) for n in dirs + names)]:
                os.lchown(name, *slate.CANDIDATE)
    (path / "locked.txt").chmod(0)
    yield path
    shutil.rmtree(path)


REFUSED = {
    "p/maps": "a symbolic link on its path (not followed)",  # the finding: PID 1's own map
    "p/environ": "a symbolic link on its path (not followed)",
    "real/q/status": "a symbolic link on its path (not followed)",
    "link/f.txt": "a symbolic link on its path (not followed)",  # even one back inside
    "maps": "a symbolic link on its path (not followed)",
    "out.txt": "a symbolic link on its path (not followed)",
    "top.txt/x": "not a directory on its path",
    "fifo": "not a regular file",
    "real": "not a regular file",
    "absent": "No such file or directory",
    "../x": "a relative path inside the work dir, without '..'",
}


def test_only_regular_files_inside_no_link_followed(workdir: Path) -> None:
    files, missing, cut = fetch_files(["top.txt", "real/f.txt", *REFUSED], str(workdir), 1 << 20)
    assert files == {"top.txt": base64.b64encode(b"top").decode(),
                     "real/f.txt": base64.b64encode(b"inside").decode()}
    assert missing == REFUSED
    assert cut == {}


@pytest.mark.skipif(not slate.isolated(), reason="needs root, to drop to the candidate's uid")
def test_read_as_the_candidate(workdir: Path) -> None:
    """The child holds the candidate's uid for good: a file the program made unreadable stays
    unread, though the harness (root) could read it."""
    files, missing, _ = fetch_files(["locked.txt"], str(workdir), 1 << 20)
    assert (files, missing) == ({}, {"locked.txt": "Permission denied"})


def test_open_inside_refuses_a_link_even_to_a_directory(workdir: Path) -> None:
    with pytest.raises(Refused, match="a symbolic link"):
        open_inside(str(workdir), "link/f.txt")
    os.close(open_inside(str(workdir), "real/f.txt"))


def test_files_within_the_limit_whole_or_left_out(workdir: Path) -> None:
    (workdir / "a.bin").write_bytes(b"a" * 300)
    (workdir / "b.bin").write_bytes(b"b" * 30)
    if slate.isolated():
        os.chown(workdir / "a.bin", *slate.CANDIDATE)
        os.chown(workdir / "b.bin", *slate.CANDIDATE)
    files, missing, cut = fetch_files(["a.bin", "b.bin"], str(workdir), 100)
    assert list(files) == ["b.bin"] and len(files["b.bin"]) == 40  # 30 bytes as base64
    assert cut == {"a.bin": 300}
    assert missing == {"a.bin": "over the response limit (300 bytes)"}


def _ran(stdout: bytes, stderr: bytes) -> dict:
    return {"status": None, "code": 0, "time_ms": 1.0, "started": True,
            "stdout": stdout, "stderr": stderr}


def test_the_harness_spends_the_limit_on_the_run_s_stdout_first(workdir: Path) -> None:
    commands = {"compile": _ran(b"c" * 40, b"w" * 40), "run": _ran(b"o" * 70, b"e" * 10)}
    got = reply(commands, {"response_limit_bytes": 100, "fetch_files": ["top.txt"]},
                str(workdir))
    sizes = {f"{step}.{stream}": len(base64.b64decode(got[step][stream]))
             for step in ("compile", "run") for stream in ("stdout", "stderr")}
    assert sizes == {"run.stdout": 70, "compile.stdout": 30, "compile.stderr": 0,
                     "run.stderr": 0}
    assert got["cut"] == {"compile.stdout": 40, "compile.stderr": 40, "run.stderr": 10}
    assert got["files"] == {} and got["cut_files"] == {"top.txt": 3}


@pytest.mark.parametrize("text", ["", "abc", "a\x00\"\\\n\u00e9\U0001f600" * 5000,
                                  "\\xff" * 40000, "\x01" * 70000])
@pytest.mark.parametrize("budget", [0, 1, 7, 1000, 1 << 17, 1 << 20])
def test_fit_json_is_the_longest_prefix_within_the_budget(text: str, budget: int) -> None:
    kept, size = fit_json(text, budget)
    assert text.startswith(kept) and size == json_size(kept) <= budget
    assert size == len(json.dumps(kept, ensure_ascii=False).encode()) - 2
    if len(kept) < len(text):
        assert json_size(text[:len(kept) + 1]) > budget


@pytest.mark.parametrize("data", [b"", b"plain", "caf\u00e9 \U0001f600".encode() * 9000,
                                  b"\xff\x00\xe2\x82" * 30000, "\u00e9".encode()[:1]])
@pytest.mark.parametrize("budget", [0, 5, 1 << 16, 1 << 22])
def test_text_within_decodes_only_what_it_keeps(data: bytes, budget: int) -> None:
    text, size, whole = text_within(data, budget)
    full = data.decode("utf-8", "backslashreplace")
    assert full.startswith(text) and size == json_size(text) <= budget
    assert whole == (text == full)
    if not whole:
        assert json_size(full[:len(text) + 1]) > budget


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_the_host_cuts_escaped_text_and_leaves_out_what_no_longer_fits() -> None:
    """8 bytes of 0xff came within the limit of 32; as text each is four characters, and
    JSON escapes the backslash: 40 bytes, so stdout is cut at 32 and the file left out."""
    limits = Limits(1.0, 1.0, 64, 1024, response_limit_bytes=32)
    run = {"status": None, "code": 0, "time_ms": 5.0, "stdout": _b64(b"\xff" * 8),
           "stderr": _b64(b"e")}
    got = _parse({"status": "ok", "run": run, "files": {"f": _b64(b"x")}, "missing": {},
                  "cut": {"run.stderr": 9}}, limits)
    assert got is not None and got.run is not None
    assert got.run.stdout == "\\xff" * 6 + "\\" and json_size(got.run.stdout) == 32
    assert got.run.stderr == ""
    assert got.cut == {"run.stdout": 8, "run.stderr": 9, "files/f": 1}
    assert got.files == {} and got.missing == {"f": "over the response limit (1 bytes)"}
