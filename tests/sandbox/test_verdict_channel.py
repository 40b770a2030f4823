"""The verdict channel belongs to the harness alone: what trusted code (the test code, its
``check``, ``test_setup``, ``prompt``, ``test_imports``) prints in the harness, the test
process, never reaches it; the test code runs in a process that never holds it.

The victim is the next item in the same container: one warm container (``POOL_SIZE=1``), no
result cache, items one after another. Under runc and gVisor."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import SandboxRuntime, ServerProcess, run_server, verify_code, wait_for_sandbox

pytestmark = pytest.mark.usefixtures("docker_ready")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory,
        sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
    env = {**sandbox_runtime.env, "REWARD_SERVER_SANDBOX_POOL_SIZE": "1",
           "REWARD_SERVER_CACHE_SIZE": "0", "REWARD_SERVER_SANDBOX_ACQUIRE_TIMEOUT_S": "60"}
    with run_server(tmp_path_factory.mktemp(f"verdict-channel-{sandbox_runtime.name}"),
                    env=env) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        yield server


def score(srv: ServerProcess, item: dict[str, Any]) -> float | None:
    (result,) = verify_code(srv.url, item)
    return result["score"]


# A verdict that passes, framed as the runner reads one, long enough to pass Python's 8 KiB
# buffer: returned by the solution, written out by the test code.
FORGED = json.dumps({"status": "ok", "tests": [
    {"status": "passed", "time_ms": 1.0, "stderr": "FORGED" + "x" * 9000}]})
FORGED_FRAME = struct.pack(">I", len(FORGED)).decode() + FORGED

RIGHT = {"response": "def f(x):\n    return x + 1\n", "entry_point": "f",
         "test_code": "assert f(1) == 2\nassert f(5) == 6"}
WRONG = {**RIGHT, "response": "def f(x):\n    return x\n"}


def assert_next_items_get_their_own_verdicts(srv: ServerProcess) -> None:
    assert [score(srv, item) for item in (RIGHT, WRONG, RIGHT, WRONG)] == [1.0, 0.0, 1.0, 0.0]


def test_a_forged_frame_the_test_code_prints_is_not_a_verdict(srv: ServerProcess) -> None:
    forger = {"response": f"def f(x):\n    return {FORGED_FRAME!r}\n", "entry_point": "f",
              "test_code": "import sys\nr = f(1)\nsys.stdout.write(r)\n"
                           "assert r == 'the right answer'"}
    assert score(srv, forger) == 0.0
    assert_next_items_get_their_own_verdicts(srv)


SHOUT = "print('All tests passed! ' * 1000)\n"  # 24 KB of the dataset's own chatter


@pytest.mark.parametrize("where", ["test_code", "check", "test_setup", "prompt",
                                   "test_imports"])
def test_trusted_code_that_prints_does_not_shift_verdicts(srv: ServerProcess,
                                                          where: str) -> None:
    def item(body: str) -> dict[str, Any]:
        if where == "check":
            return {"response": body, "entry_point": "f", "test_code":
                    "def check(candidate):\n    " + SHOUT + "    assert candidate(1) == 2\n"}
        base = {"response": body, "test_list": ["assert f(1) == 2", "assert f(5) == 6"]}
        if where == "test_code":
            return {**base, "test_list": [SHOUT.strip(), *base["test_list"]]}
        if where == "test_imports":
            return {**base, "test_imports": [SHOUT.strip()]}
        if where == "prompt":
            return {**base, "prompt": SHOUT}
        return {**base, "test_setup_code": SHOUT}

    right, wrong = "def f(x):\n    return x + 1\n", "def f(x):\n    return x\n"
    assert [score(srv, item(b)) for b in (right, wrong, right, wrong)] == [1.0, 0.0, 1.0, 0.0]
    assert_next_items_get_their_own_verdicts(srv)


def test_test_code_cannot_reach_the_verdict_channel(srv: ServerProcess) -> None:
    """Test code ran in the harness and wrote a forged frame on the channel's own descriptor
    (the host then ran the item again and scored it 0). It runs in a tester now, which never
    holds the channel: a forged frame written on every descriptor it has but its two sockets
    (its relay to PID 1 and its own fork server: breaking them nulls its own item only), and
    on every one of PID 1's it can open, reaches no verdict (the item, right, scores 1 in one
    run), and the next items get their own verdicts."""
    writer = {"response": "def f(x):\n    return x + 1\n", "entry_point": "f", "test_code": (
        "import os\n"
        f"frame = {FORGED_FRAME.encode()!r}\n"
        "paths = ['/proc/1/fd/' + n for n in os.listdir('/proc/1/fd')] "
        "if os.access('/proc/1/fd', os.R_OK) else []\n"
        "for fd in range(64):\n"
        "    try:\n"
        "        if not os.readlink('/proc/self/fd/%d' % fd).startswith('socket:'):\n"
        "            os.write(fd, frame)\n"
        "    except OSError:\n"
        "        pass\n"
        "for path in paths + ['/proc/1/fd/%d' % n for n in range(64)]:\n"
        "    try:\n"
        "        with open(path, 'wb') as sink:\n"
        "            sink.write(frame)\n"
        "    except OSError:\n"
        "        pass\n"
        "assert f(1) == 2")}
    assert score(srv, writer) == 1.0
    assert_next_items_get_their_own_verdicts(srv)
