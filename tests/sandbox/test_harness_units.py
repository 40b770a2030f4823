"""The harness's pure parts, on the host (no container): text escaping, which test setup runs
before the candidate, the clean-up of trees a candidate locked, and the runner's check of a
verdict's shape (issue 10)."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

from sandbox.runner import parse_reply
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "sandbox" / "harness"))
import harness  # noqa: E402
import slate  # noqa: E402


@pytest.mark.parametrize(("value", "expected"), [
    ("ok", "ok"),
    ("\ud800", "\\ud800"),
    ({"a\udfff": ["x\ud800y", 1, None]}, {"a\\udfff": ["x\\ud800y", 1, None]}),
    ("é ✓", "é ✓"),
])
def test_printable_escapes_lone_surrogates_only(value: object, expected: object) -> None:
    assert harness.printable(value) == expected
    harness.json.dumps(harness.printable(value), ensure_ascii=False).encode("utf-8")


def test_tail_escapes_invalid_utf8() -> None:
    assert harness.tail(b"ok \xff\xed\xa0\x80 \xc3\xa9", 100) == "ok \\xff\\xed\\xa0\\x80 é"


@pytest.mark.parametrize(("source", "uses"), [
    ("import math", False),
    ("METADATA = {'x': 1}", False),
    ("def check(candidate):\n    assert candidate(1) == 2", False),
    ("def helper(x=add(1)):\n    pass", True),  # a default runs at definition
    ("@candidate\ndef g():\n    pass", True),
    ("x = add(1, 2)", True),
    ("f = lambda: add(1)", False),
    ("class C:\n    y = add(1)", True),  # a class body runs at definition
    ("values = [candidate(i) for i in range(3)]", True),
])
def test_mentions_finds_setup_that_would_run_the_candidate(source: str, uses: bool) -> None:
    (node,) = ast.parse(source).body
    assert harness.mentions(node, {"candidate", "add"}) is uses


def test_remove_tree_unlocks_what_a_candidate_locked(tmp_path: Path) -> None:
    locked = tmp_path / "box" / "dir" / "sub"
    locked.mkdir(parents=True)
    (locked / "secret").write_text("x")
    os.symlink("/etc", tmp_path / "box" / "link")  # removed, never followed
    os.chmod(locked, 0)
    os.chmod(locked.parent, 0)
    slate.empty_dir(str(tmp_path / "box"))
    assert os.listdir(tmp_path / "box") == []
    assert os.path.exists("/etc/passwd")


def test_ipc_counts_and_ids_see_a_new_segment() -> None:
    """The kernel's counters (what the clean-slate check reads) and /proc/sysvipc (what the
    clean-up reads) both see a segment; removing it by the listed id brings the count back."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    before = slate.ipc_counts()
    ident = libc.shmget(0, 4096, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    assert ident >= 0
    try:
        assert slate.ipc_counts()["shm"] == before["shm"] + 1  # pages
        assert ident in slate.ipc_ids("shm")
    finally:
        assert libc.shmctl(ident, slate.IPC_RMID, None) == 0
    assert slate.ipc_counts() == before


@pytest.mark.parametrize("reply", [
    5, [], {}, {"status": "ok", "tests": 5}, {"status": "maybe"},
    {"status": "ok", "tests": [{"status": "passed", "time_ms": "fast"}]},
    {"status": "ok", "tests": [{"status": "forged"}]},
    {"status": "ok", "tests": ["passed"]},
])
def test_parse_reply_rejects_malformed_verdicts(reply: object) -> None:
    assert parse_reply(reply) is None


def test_parse_reply_escapes_text() -> None:
    result = parse_reply({"status": "ok", "detail": "\ud800", "tests": [
        {"status": "runtime_error", "time_ms": 1, "stderr": "x\udfff"}]})
    assert result is not None
    assert result.detail == "\\ud800" and result.tests[0].stderr == "x\\udfff"
