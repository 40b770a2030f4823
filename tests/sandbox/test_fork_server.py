"""Executions share nothing but the image: a program forked from the Python fork server (the
zygote, sandbox/harness/zygote.py) finds no earlier program in its own process.

The attack: a caller's code item holds a secret constant; the zygote kept the item's compiled
program in a local, and a ``/run_code`` snippet forked from it walked its stack, printed the
program's constants (and could run it on new input). Here every way a program forks from the
zygote (a ``/run_code`` snippet, the next stdin/stdout item's tests, an assert item's
candidate server) runs ``SECRET_HUNT`` (tests/helpers/probes.py) in the container the secret's
item ran in: its frames, its heap and its raw memory hold no secret but its own. Through the
real server and engine, under runc and gVisor; and once at the harness level, no engine.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.harness import slate
from sandbox.harness.zygote import Zygote
from tests.conftest import ServerProcess
from tests.helpers.code import ONE_CONTAINER, sandbox_server, verify_one
from tests.helpers.probes import SECRET_HUNT, SECRET_HUNT_EXPECTED, secret_program

SUMS = [{"input": f"{k} {k * 3}\n", "output": str(k * 4)} for k in (1, 7, 12)]
# Says which container ran the program (its hostname is the container id) and whether it is
# a fork (the harness, PID 1, starts a fresh interpreter itself), on stderr
WHERE = ("import os as _os, sys as _sys\n"
         "print('ran in', _os.uname().nodename, 'forked', _os.getppid() != 1,\n"
         "      file=_sys.stderr, flush=True)\n")
TO_STDERR = "import sys\nsys.stdout = sys.stderr\n"  # an item's result carries its stderr
HUNT_S = 20  # the hunt reads every object and every readable page: ~0.2 s, more under gVisor


def new_secret() -> str:
    return "zqx-secret-" + secrets.token_hex(12)


# --- the harness alone ------------------------------------------------------------------------

@pytest.fixture
def work_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A work dir the candidate's uid can enter (pytest's tmp_path is under a root-only one),
    as the zygote's WORK_ROOT."""
    path = Path(tempfile.mkdtemp())
    if os.geteuid() == 0:
        os.chown(path, *slate.CANDIDATE)  # the zygote's children drop to the candidate's uid
    monkeypatch.setattr(slate, "WORK_ROOT", str(path))
    yield path
    shutil.rmtree(path)


def test_a_program_forked_after_another_finds_nothing_of_it(work_dir: Path) -> None:
    """The zygote's own protocol, on this machine: an item's program is loaded and run on a
    test; then a snippet (the zygote's child) and the next item's program (a new loader's
    child) each hunt for its secret. Before: the snippet found it in all three places."""
    tmp_path = work_dir
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    zygote = Zygote()
    try:
        zygote.wait_ready(time.monotonic() + 60)
        secret = new_secret()
        assert zygote.load(secret_program(secret), "main.py", str(tmp_path), env,
                           time.monotonic() + 30) is None
        assert run_loaded(zygote, b"1 2\n") == "3\n"
        zygote.unload(time.monotonic() + 30)
        assert not zygote.loaded and zygote.alive()

        snippet = zygote.script(SECRET_HUNT, 0, HUNT_S, "main.py", str(tmp_path), env)
        snippet.stdin.close()
        assert snippet.stdout.read().decode().strip() == SECRET_HUNT_EXPECTED
        assert snippet.wait() == 0

        assert zygote.load(SECRET_HUNT, "main.py", str(tmp_path), env,
                           time.monotonic() + 30) is None
        assert run_loaded(zygote, b"").strip() == SECRET_HUNT_EXPECTED
        zygote.unload(time.monotonic() + 30)
    finally:
        zygote.close()


def run_loaded(zygote: Zygote, stdin: bytes) -> str:
    process = zygote.start(0, HUNT_S, "main.py")
    process.stdin.write(stdin)
    process.stdin.close()
    out = process.stdout.read().decode()
    assert process.wait() == 0, process.stderr.read()
    return out


# --- through the server and the engine --------------------------------------------------------

# One container for items (and its spare), reused last in, first out: consecutive calls
# share it, as a second caller's call would
srv = sandbox_server("fork-server", ONE_CONTAINER)


def post(srv: ServerProcess, path: str, payload: dict[str, Any]) -> Any:
    with srv.client() as c:
        r = c.post(path, content=json.dumps(payload),
                   headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    return r.json()


def where(text: str) -> str:
    found = re.search(r"ran in (\S+)", text)
    assert found, text
    return found.group(1)


def score_secret(srv: ServerProcess) -> tuple[str, str]:
    """A caller's item whose program holds a secret, scored: (the secret, its container)."""
    secret = new_secret()
    result = verify_one(srv, response=WHERE + secret_program(secret), tests=SUMS)
    assert (result["status"], result["score"]) == ("ok", 1.0), result
    return secret, where(result["tests"][0]["stderr"])


def hunted(text: str, secret: str, container: str) -> str:
    """What the hunt printed, checked to have run where the secret's item ran, forked."""
    assert where(text) == container, "another container: nothing was proven"
    assert "forked True" in text, text
    assert secret not in text, text
    return text.split("\n", 1)[1].strip()


@pytest.mark.usefixtures("docker_ready")
def test_a_snippet_after_an_item_finds_nothing_of_its_program(srv: ServerProcess) -> None:
    secret, container = score_secret(srv)
    got = post(srv, "/run_code", {"language": "python", "code": WHERE + TO_STDERR + SECRET_HUNT,
                                  "run_timeout": HUNT_S, "memory_limit_MB": 512})
    assert got["status"] == "Success", got
    assert got["run_result"]["stdout"] == "", got
    assert hunted(got["run_result"]["stderr"], secret, container) == SECRET_HUNT_EXPECTED


@pytest.mark.usefixtures("docker_ready")
@pytest.mark.parametrize("style", ["stdio", "assert"])
def test_the_next_item_finds_nothing_of_the_last_ones_program(srv: ServerProcess,
                                                              style: str) -> None:
    """The next caller's program: a test of a stdin/stdout item (forked from its own loader)
    or an assert item's candidate server (the zygote's child), printing to stderr."""
    secret, container = score_secret(srv)
    hunt = WHERE + TO_STDERR + SECRET_HUNT
    if style == "stdio":
        result = verify_one(srv, response=hunt, tests=[{"output": "?"}], time_limit_s=HUNT_S,
                            memory_mb=512)
        assert result["tests"][0]["status"] == "wrong_answer", result
    else:
        result = verify_one(srv, response=hunt + "def f():\n    return 0\n",
                            test_code="assert f() == 1", entry_point="f", memory_mb=512)
        assert result["tests"][0]["status"] == "wrong_answer", result
    text = result["tests"][0]["stderr"]
    assert SECRET_HUNT_EXPECTED in hunted(text, secret, container), text
