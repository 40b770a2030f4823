"""``POST /run_code``'s files and size through the real server and Docker engine, under runc
and gVisor: ``fetch_files`` resolves each path inside the work dir without following a link
anywhere on it, as the program's own user (a link to ``/proc/self`` once handed the caller
the harness's memory map), and one call's answer stays within the response limit, what was
cut named, the server's memory bounded while it answers (8 MiB of escaped bytes on each
stream and a 16 MiB file once made a 101 MB answer and grew it by 300 MB). Names at the work
dir's bounds are written and read back, names past them are the caller's 422 (they were a
503 and a container spent), and a fresh interpreter runs at the memory floor. Units of the
same: tests/sandbox/test_fetch_files.py, tests/sandbox/test_work_dir_paths.py."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.config import MIN_MEMORY_MB, SandboxConfig
from sandbox.harness.paths import MAX_DEPTH, MAX_PATH_BYTES, NAME_MAX
from tests.conftest import ServerProcess
from tests.helpers.code import sandbox_server
from tests.helpers.metrics import metric
from tests.helpers.sandbox_pool import POOL, assert_clean

# what the server does around the sandbox: under gVisor too only where marked isolation
pytestmark = [pytest.mark.usefixtures("docker_ready"), pytest.mark.host_side]

STARTUP_S = 180
LIMIT = SandboxConfig.snippet_response_limit_bytes


srv = sandbox_server("run-code-bounds", {"REWARD_SERVER_SANDBOX_POOL_SIZE": str(POOL)},
                     STARTUP_S)


def post(srv: ServerProcess, **body: Any) -> httpx.Response:
    with httpx.Client(base_url=srv.url, timeout=120) as c:
        r = c.post("/run_code", json={"language": "python", **body})
    assert r.status_code == 200, r.text[:2000]
    return r


# The program leaves links in its work dir: to the harness's /proc entries (as /proc/self
# names them when PID 1 opens it, and as /proc/1), to a file outside the work dir, and to a
# directory inside it; then a FIFO, a file it cannot read itself, and one plain file.
LINKS = r"""
import os
os.symlink("/proc/self", "p")
os.mkdir("a")
os.symlink("/proc/1", "a/b")
os.symlink("/proc/self/maps", "maps")
os.symlink("/opt/harness/serve.py", "outside.py")
os.mkdir("real")
open("real/f.txt", "w").write("inside")
os.symlink("real", "link")
os.mkfifo("fifo")
open("locked.txt", "w").write("locked")
os.chmod("locked.txt", 0)
open("mine.txt", "w").write("mine")
print("left")
"""
REFUSED = {
    "p/maps": "a symbolic link on its path (not followed)",
    "p/environ": "a symbolic link on its path (not followed)",
    "p/status": "a symbolic link on its path (not followed)",
    "p/fd/1": "a symbolic link on its path (not followed)",
    "a/b/maps": "a symbolic link on its path (not followed)",
    "a/b/environ": "a symbolic link on its path (not followed)",
    "maps": "a symbolic link on its path (not followed)",
    "outside.py": "a symbolic link on its path (not followed)",
    "link/f.txt": "a symbolic link on its path (not followed)",
    "fifo": "not a regular file",
    "locked.txt": "Permission denied",
}
# What any of the harness's /proc files or its code would show
HARNESS_DATA = ("python3", "/usr/", "VmRSS", "PATH=", "def serve", "[heap]")


@pytest.mark.isolation
def test_fetch_files_follows_no_link_and_reads_as_the_program(srv: ServerProcess) -> None:
    r = post(srv, code=LINKS, fetch_files=[*REFUSED, "mine.txt"])
    got = r.json()
    assert got["status"] == "Success", got["message"]
    assert got["files"] == {"mine.txt": base64.b64encode(b"mine").decode()}
    for name, why in REFUSED.items():
        assert f"fetch_files {name!r}: {why}" in got["message"], (name, got["message"])
    for data in HARNESS_DATA:
        assert data not in r.text, data
    assert_clean(srv)


# Names at each bound of the work dir's rule (sandbox/harness/paths.py): the longest
# component, the deepest path, the longest path (less room for the work dir's), beside each
# other and in shared directories
LONGEST = "/".join(["p" * NAME_MAX] * 14 + ["p" * (NAME_MAX - 1), "q"])
AT_THE_BOUNDS = ["n" * NAME_MAX, "d/" * (MAX_DEPTH - 1) + "f", "d/" * (MAX_DEPTH - 2) + "g",
                 LONGEST, "sub\\x.txt", "sub/y.txt"]
READ_THEM = """
import os
for top, _, names in sorted(os.walk(".")):
    for name in sorted(names):
        path = os.path.join(top, name)[2:]
        if path != "main.py":
            print(len(path.encode()), open(path).read())
"""


def test_names_at_the_bounds_are_written_and_read_back(srv: ServerProcess) -> None:
    files = {name: base64.b64encode(name[-8:].encode()).decode() for name in AT_THE_BOUNDS}
    fetch = [name.replace("\\", "/") for name in AT_THE_BOUNDS]
    got = post(srv, code=READ_THEM, files=files, fetch_files=fetch).json()
    assert got["status"] == "Success", got["message"]
    assert f"{MAX_PATH_BYTES} {LONGEST[-8:]}\n" in got["run_result"]["stdout"]
    assert len(got["run_result"]["stdout"].splitlines()) == len(AT_THE_BOUNDS)
    assert got["files"] == {name.replace("\\", "/"): data for name, data in files.items()}
    assert_clean(srv)


# Each broke the harness (a NUL, ENAMETOOLONG, RecursionError in os.makedirs, a file that
# is a directory too): a 503 SandboxError counted against the sandbox, and a container spent
BROKE_THE_HARNESS = [{"a\0b": ""}, {"a" * 5000: ""}, {"d/" * 3000 + "f": ""},
                     {"a": "", "a/b": ""}]
SANDBOX_ERRORS = r'reward_items_total\{status="SandboxError",verifier="run_code"\}'


def test_names_the_harness_cannot_write_are_the_callers_422(srv: ServerProcess) -> None:
    before = metric(srv.url, SANDBOX_ERRORS)
    with httpx.Client(base_url=srv.url, timeout=120) as c:
        for files in BROKE_THE_HARNESS:
            r = c.post("/run_code", json={"language": "python", "code": "1", "files": files})
            assert r.status_code == 422, r.text[:300]
            assert r.json()["detail"].startswith("files["), r.json()
    assert metric(srv.url, SANDBOX_ERRORS) == before
    assert_clean(srv)


@pytest.mark.isolation
def test_the_memory_floor_runs_a_fresh_interpreter(srv: ServerProcess) -> None:
    """At the least memory a caller may ask for, Python starts under either runtime (with a
    file sent, a fresh interpreter, not the warm fork server), imports and allocates."""
    got = post(srv, code="import json, decimal, statistics\nprint(len([0] * 10**6))",
               files={"x.txt": ""}, memory_limit_MB=MIN_MEMORY_MB).json()
    assert got["status"] == "Success", got
    assert got["limits"]["memory_limit_MB"] == MIN_MEMORY_MB


FLOOD = r"""
import sys
with open("big.bin", "wb") as f:
    f.write(b"\xff" * (16 << 20))
sys.stdout.buffer.write(b"\xff" * (8 << 20))
sys.stdout.flush()
sys.stderr.buffer.write(b"\xff" * (8 << 20))
"""
# The answer's overhead beside its streams and files: the other fields and the message
SLACK_BYTES = 64 * 1024
# Peak memory the server may add for one such call: it holds the harness's frame (4/3 of the
# limit), the decoded bytes and their text, and the rendered answer, a few copies of the
# limit; before the limit it grew by 300 MB
GROWTH_BOUND_BYTES = 10 * LIMIT


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (its peak) of a process, in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def test_one_call_s_answer_stays_within_the_response_limit(srv: ServerProcess) -> None:
    post(srv, code="print(1)")  # the path warm: its first call's imports are not the answer's
    before = memory(srv.proc.pid)
    r = post(srv, code=FLOOD, fetch_files=["big.bin"])
    after = memory(srv.proc.pid)
    got = r.json()
    assert len(r.content) <= LIMIT + SLACK_BYTES, len(r.content)
    assert got["cut"] == {"run_result.stdout": 8 << 20, "run_result.stderr": 8 << 20,
                          "files/big.bin": 16 << 20}, got["cut"]
    assert got["files"] == {} and got["limits"]["response_limit_bytes"] == LIMIT
    # stdout is what a caller judges: cut, it is no Success
    assert got["status"] == "Failed" and got["run_result"]["return_code"] == 0
    assert got["run_result"]["stdout"].startswith("\\xff\\xff")
    assert f"run_result.stdout: cut to its first bytes at the response limit of {LIMIT}" \
        in got["message"]
    assert "fetch_files 'big.bin': over the response limit (16777216 bytes)" in got["message"]
    growth = max(after["VmHWM"], after["VmRSS"]) - before["VmRSS"]
    assert growth < GROWTH_BOUND_BYTES, (before, after)
    print(f"server memory: {before} -> {after}, answer {len(r.content)} bytes")
    again = post(srv, code="print(input()[::-1])", stdin="abc")
    assert again.json()["run_result"]["stdout"] == "cba\n"
    assert_clean(srv)


def test_output_within_the_limit_comes_back_whole(srv: ServerProcess) -> None:
    """A large stdout of plain text and a file beside it, together under the limit: nothing
    cut, the answer as before."""
    code = ("import sys\nopen('out.bin', 'wb').write(bytes(range(256)) * 4096)\n"
            "sys.stdout.write('line\\n' * (1 << 20))")
    got = post(srv, code=code, fetch_files=["out.bin"]).json()
    assert got["status"] == "Success" and got["cut"] == {}, got["message"]
    assert got["run_result"]["stdout"] == "line\n" * (1 << 20)
    assert base64.b64decode(got["files"]["out.bin"]) == bytes(range(256)) * 4096
