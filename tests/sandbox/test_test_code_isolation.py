"""A code item's test code (``test_code``, ``test_setup``, a prompt, a checker) is the
caller's, and the container serves the next caller after it. It must reach neither the
harness nor another caller's items: it ran in the harness itself (PID 1, root), where a few
lines patched the harness so that every later item of every caller passed. Now it runs in a
process of its own per job, forked from the fork server, under a uid of its own with no
capability. Through the real server with one container (each item meets what the one
before it left), under runc and gVisor."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.conftest import ServerProcess, verify_code
from tests.helpers.code import ONE_CONTAINER, sandbox_server

pytestmark = pytest.mark.usefixtures("docker_ready")

WRONG_ADD = "```python\ndef add(a, b):\n    return a - b\n```"
RIGHT_ADD = "```python\ndef add(a, b):\n    return a + b\n```"

# Patches every harness function a verdict goes through into one that passes, in whatever
# process the test code runs; then passes its own test.
PATCH = """import sys
def passed(*args, **kwargs):
    return {"status": "passed", "time_ms": 0.0, "stderr": ""}
def equal(*args, **kwargs):
    return True
for mod in list(sys.modules.values()):
    for name, fake in (("run_one", passed), ("call_output_matches", equal)):
        if hasattr(mod, name):
            try:
                setattr(mod, name, fake)
            except Exception:
                pass
assert add(1, 1) == 2
"""

# Looks for any earlier job's secret (``vr-secret-`` and 16 hex digits) in this process's
# objects and raw memory (made readable to itself first); its own source holds none.
SCAN = """import ctypes, gc, re
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
pattern = re.compile(rb"vr-secret-[0-9a-f]{16}")
found = set()
for o in gc.get_objects():
    values = o.values() if isinstance(o, dict) else o if isinstance(o, list) else ()
    for v in list(values):
        if isinstance(v, str):
            found.update(pattern.findall(v.encode("utf-8", "ignore")))
with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
    for line in maps:
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if not perms.startswith("r") or hi - lo > 1 << 28:
            continue
        try:
            mem.seek(lo)
            found.update(pattern.findall(mem.read(hi - lo)))
        except (OSError, ValueError, OverflowError):
            pass
assert not found, sorted(found)
assert add(1, 1) == 2
"""


# Drives every fork-server socket it holds with each request but ``serve``: a loader of its
# own fork server (root) compiled a file the test code named, and the compile error quoted it
DRIVES_ITS_FORK_SERVER = """import json, os, socket
replies = []
for fd in range(3, 64):
    try:
        if not os.readlink("/proc/self/fd/%d" % fd).startswith("socket:"):
            continue
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        continue
    if s.type != socket.SOCK_SEQPACKET:
        continue
    s.settimeout(5)
    for op in ("load", "script", "run", "tester", "unload"):
        src = os.memfd_create("x")
        os.write(src, b"\\n" + b"return 1")
        os.lseek(src, 0, 0)
        request = {"op": op, "name": "/etc/shadow", "cwd": "/", "env": {}, "memory_mb": 64,
                   "cpu_s": 1, "argv0": "x"}
        try:
            socket.send_fds(s, [json.dumps(request).encode()], [src])
            replies.append(s.recv(65536).decode())
        except OSError as exc:
            replies.append(repr(exc))
        os.close(src)
assert replies and all("cannot" in r for r in replies), replies
assert add(1, 1) == 2
"""


srv = sandbox_server("test-code", ONE_CONTAINER)


def victims() -> list[dict[str, Any]]:
    """Another caller's wrong answers, by assertion and by call."""
    return [{"response": WRONG_ADD, "test_code": "assert add(2, 3) == 5"},
            {"response": WRONG_ADD, "fn_name": "add",
             "tests": [{"input": [2, 3], "output": 5}]}]


def test_test_code_cannot_make_later_items_pass(srv: ServerProcess) -> None:
    (attack,) = verify_code(srv.url, {"response": RIGHT_ADD, "test_code": PATCH})
    assert attack["score"] == 1.0, attack
    for _ in range(2):
        results = verify_code(srv.url, *victims())
        assert [r["score"] for r in results] == [0.0, 0.0], results


def test_test_code_runs_under_its_own_uid_without_root(srv: ServerProcess) -> None:
    check = ("import os\nassert (os.getuid(), os.geteuid(), os.getgroups()) == "
             "(10003, 10003, []), (os.getuid(), os.geteuid())\n"
             "assert open('/proc/self/status').read().count('CapEff:\\t0000000000000000')\n"
             "assert add(1, 1) == 2\n")
    (result,) = verify_code(srv.url, {"response": RIGHT_ADD, "test_code": check})
    assert result["score"] == 1.0, result


def test_test_code_finds_no_earlier_job_in_its_memory(srv: ServerProcess) -> None:
    secret = {"response": RIGHT_ADD, "test_code": f"EXPECTED = 'vr-secret-{secrets.token_hex(8)}'"
                                                  "\nassert add(1, 1) == 2\n"}
    (first,) = verify_code(srv.url, secret)
    assert first["score"] == 1.0, first
    (scan,) = verify_code(srv.url, {"response": RIGHT_ADD, "test_code": SCAN})
    assert scan["score"] == 1.0, scan  # its first test lists what it found


def test_test_code_gets_nothing_of_roots_from_its_own_fork_server(srv: ServerProcess) -> None:
    """The tester's own fork server keeps root (its children drop to the candidate's uid):
    it forks candidate servers for the tester and refuses anything else."""
    (result,) = verify_code(srv.url, {"response": RIGHT_ADD,
                                      "test_code": DRIVES_ITS_FORK_SERVER})
    assert result["score"] == 1.0, result
