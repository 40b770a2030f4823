"""The names a caller gives the work dir's files (``files``, ``fetch_files``): the one rule
(``sandbox/harness/paths.py``), as the host checks it before any container is asked for
(``sandbox/caller_files.py``) and as the harness keeps it when it writes them. A name the
kernel cannot take, or the harness cannot write, was the sandbox's 503 and cost a container
(a NUL, a 5000-byte component, 3000 levels: RecursionError in ``os.makedirs``, ``a`` beside
``a/b``); each is the caller's own error here, naming the field. Host units: no engine."""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.caller_files import BASE64_PIECE, check_paths, is_base64
from sandbox.harness import slate
from sandbox.harness.paths import MAX_DEPTH, MAX_PATH_BYTES, NAME_MAX
from sandbox.harness.snippet import write_files

ONE = base64.b64encode(b"1").decode()
DEEP = "d/" * 3000 + "f"
# names at each bound: the longest component, the deepest path, the longest path
LONGEST = "/".join(["p" * NAME_MAX] * 14 + ["p" * (NAME_MAX - 1), "q"])
AT_THE_BOUNDS = ["n" * NAME_MAX, "é" * (NAME_MAX // 2), "d/" * (MAX_DEPTH - 1) + "f", LONGEST]


def test_names_at_the_bounds_pass() -> None:
    assert len(LONGEST.encode()) == MAX_PATH_BYTES
    assert check_paths(dict.fromkeys(AT_THE_BOUNDS, ONE), tuple(AT_THE_BOUNDS), "main.py") is None


@pytest.mark.parametrize(("names", "detail"), [
    (["a\0b"], "files['a\\x00b']: a control character ('\\x00') in the name"),
    (["a\nb"], "files['a\\nb']: a control character ('\\n') in the name"),
    (["a\x7f"], "files['a\\x7f']: a control character ('\\x7f') in the name"),
    (["n" * (NAME_MAX + 1)], f"a component of {NAME_MAX + 1} bytes, more than NAME_MAX (255)"),
    (["é" * 128], "a component of 256 bytes, more than NAME_MAX (255)"),  # bytes, not characters
    (["a" * 5000], f"more than {MAX_PATH_BYTES} bytes (PATH_MAX"),
    ([LONGEST + "q"], f"more than {MAX_PATH_BYTES} bytes (PATH_MAX"),
    ([LONGEST[:-1] + "é"], f"more than {MAX_PATH_BYTES} bytes (PATH_MAX"),
    ([DEEP], f"more than {MAX_PATH_BYTES} bytes (PATH_MAX"),
    (["d/" * MAX_DEPTH + "f"], f"{MAX_DEPTH + 1} levels deep, more than {MAX_DEPTH}"),
    (["a", "a/b"], "files['a/b']: its directory 'a' is files['a'], a file"),
    (["a/b/c", "a/b"], "files['a/b']: a file, and a directory of files['a/b/c']"),
    (["a/b", "a\\b"], "files['a\\\\b']: the same file as files['a/b']"),
    (["main.py/x"], "files['main.py/x']: its directory 'main.py' is the program's own file"),
    (["main.py"], "files['main.py']: the program's own file name in this language"),
    (["../x"], "files['../x']: a relative path inside the work dir"),
])
def test_a_name_the_harness_cannot_write_is_named(names: list[str], detail: str) -> None:
    why = check_paths(dict.fromkeys(names, ONE), (), "main.py")
    assert why is not None and detail in why, why
    assert why.startswith("files[")
    assert len(why) < 600  # a name of megabytes is shown cut, not echoed


@pytest.mark.parametrize(("name", "detail"), [
    ("x" * 200_000, f"fetch_files[1]: more than {MAX_PATH_BYTES} bytes"),
    ("a\0", "fetch_files[1]: a control character"),
    ("n" * 256, "fetch_files[1]: a component of 256 bytes"),
])
def test_fetch_names_meet_the_same_rule(name: str, detail: str) -> None:
    why = check_paths({}, ("ok.txt", name), "")
    assert why is not None and why.startswith(detail), why


def test_a_session_has_no_program_file() -> None:
    assert check_paths({"main.py": ONE, "main.py.d/x": ONE}, (), "") is None


@pytest.mark.parametrize("text", [
    "", "QQ==", "QUI=", "QUJD", "QQ", "QQ=", "Q===", "QQ==QQ==", "é", " QQ==", "QQ==\n",
    "A" * BASE64_PIECE + "QQ==",
    "A" * (BASE64_PIECE - 4) + "QQ==" + "AAAA",  # padding where a piece ends, data after it
    "A" * (BASE64_PIECE - 2) + "==" + "A" * 6,
    base64.b64encode(os.urandom(3 * BASE64_PIECE // 2)).decode(),
    base64.b64encode(os.urandom(3 * BASE64_PIECE // 2 + 1)).decode(),
])
def test_base64_by_pieces_reads_as_b64decode_validate(text: str) -> None:
    try:
        base64.b64decode(text, validate=True)
        whole = True
    except (binascii.Error, ValueError):
        whole = False
    assert is_base64(text) is whole


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A work dir as the harness makes one: the candidate's when we are root."""
    path = Path(tempfile.mkdtemp(prefix="paths-"))
    path.chmod(0o755)
    if slate.isolated():
        os.chown(path, *slate.CANDIDATE)
    yield path
    shutil.rmtree(path)


def test_the_harness_keeps_the_rule(workdir: Path) -> None:
    """Defence in depth: a name that reached the harness anyway is a ValueError (the job's
    error), never RecursionError from 3000 levels of directories."""
    for name in (DEEP, "a\0b", "n" * 300):
        with pytest.raises(ValueError):
            write_files({name: ONE}, str(workdir))
    with pytest.raises(OSError):
        write_files({"a": ONE, "a/b": ONE}, str(workdir))


def test_the_harness_writes_names_at_the_bounds(workdir: Path) -> None:
    """One directory at a time (os.makedirs recursed once per level), each made once."""
    files = dict.fromkeys(AT_THE_BOUNDS, ONE)
    files.update({"d/" * (MAX_DEPTH - 2) + "g": ONE, "sub\\x.txt": ONE})
    write_files(files, str(workdir))
    for name in files:
        assert (workdir / name.replace("\\", "/")).read_bytes() == b"1"
