"""Hostile programs. After each: the server is healthy, the item has a truthful status, and
no container or process is left over (each pool container runs only its harness)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import SandboxRuntime, ServerProcess
from tests.helpers import probes
from tests.helpers.code import code_server, verify_one
from tests.helpers.sandbox_pool import POOL, assert_clean

pytestmark = pytest.mark.usefixtures("docker_ready")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory,
        sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
    """Under runc on the main engine, then under gVisor on the second (tests/conftest.py)."""
    env = {**sandbox_runtime.env, "REWARD_SERVER_SANDBOX_POOL_SIZE": str(POOL),
           "REWARD_SERVER_SANDBOX_DEFAULT_TIME_LIMIT_S": "2", "REWARD_SERVER_CACHE_SIZE": "0"}
    with code_server(tmp_path_factory.mktemp(f"hostile-{sandbox_runtime.name}"),
                     env=env) as server:
        yield server


def test_fork_bomb(srv: ServerProcess) -> None:
    result = verify_one(srv, response="import os\nwhile True:\n    os.fork()",
                        tests=[{"output": "never"}])
    assert result["tests"][0]["status"] in {"timeout", "runtime_error"}
    assert result["score"] == 0.0
    assert_clean(srv)


def test_infinite_loop(srv: ServerProcess) -> None:
    result = verify_one(srv, response="while True: pass", tests=[{"output": ""}], time_limit_s=1)
    assert result["tests"][0]["status"] == "timeout"
    # it ran to its 1 s limit and was stopped there: the upper bound tells that from the
    # server's 30 s maximum, with room for a loaded machine's late kill (not a speed goal)
    assert 900 < result["tests"][0]["time_ms"] < 10_000
    assert_clean(srv)


def test_allocate_10_gb(srv: ServerProcess) -> None:
    result = verify_one(srv, response="x = bytearray(10 * 1024**3)\nprint(len(x))",
                        tests=[{"output": str(10 * 1024**3)}])
    assert result["tests"][0]["status"] == "memory_limit", result
    assert_clean(srv)


def test_allocate_gradually(srv: ServerProcess) -> None:
    program = "xs = []\nwhile True:\n    xs.append(bytearray(10 * 1024**2))"
    result = verify_one(srv, response=program, tests=[{"output": ""}])
    assert result["tests"][0]["status"] == "memory_limit", result
    assert_clean(srv)


def test_print_1_gb(srv: ServerProcess) -> None:
    program = "import sys\nchunk = 'x' * 1_000_000\nfor _ in range(1000):\n    sys.stdout.write(chunk)"
    result = verify_one(srv, response=program, tests=[{"output": "x"}])
    assert result["tests"][0]["status"] == "output_limit"
    assert_clean(srv)


def test_print_1_gb_to_stderr(srv: ServerProcess) -> None:
    program = "import sys\nchunk = 'x' * 1_000_000\nfor _ in range(1000):\n    sys.stderr.write(chunk)"
    result = verify_one(srv, response=program, tests=[{"output": ""}])
    assert result["tests"][0]["status"] == "output_limit"
    assert len(result["tests"][0]["stderr"]) <= 2048
    assert_clean(srv)


def test_no_network_outside_or_to_the_host(srv: ServerProcess) -> None:
    port = srv.url.rsplit(":", 1)[1]
    result = verify_one(srv, response=probes.network_probe(port),
                        tests=[{"output": probes.NETWORK_EXPECTED}])
    assert result["tests"][0]["status"] == "passed", result
    assert_clean(srv)


def test_no_writes_outside_the_work_dir_no_host_files(srv: ServerProcess) -> None:
    result = verify_one(srv, response=probes.FILESYSTEM_PROBE,
                        tests=[{"output": probes.filesystem_expected(srv.runtime)}])
    assert result["tests"][0]["status"] == "passed", result
    assert_clean(srv)


def test_child_outliving_its_parent_is_killed(srv: ServerProcess) -> None:
    result = verify_one(srv, response=probes.CHILD_OUTLIVES,
                        tests=[{"output": probes.CHILD_OUTLIVES_EXPECTED}])
    assert result["tests"][0]["status"] == "passed"
    assert_clean(srv)  # the sleepers are gone and the container was checked


def test_kill_everything(srv: ServerProcess) -> None:
    result = verify_one(srv, response=probes.KILL_EVERYTHING,
                        tests=[{"output": probes.KILL_EVERYTHING_EXPECTED}, {"output": "x"}])
    # kill(-1) spares init (the harness) and the caller; the fork server dies, so the test
    # either completes or is reported as the crash it is. Both tests are judged.
    first, second = (t["status"] for t in result["tests"])
    assert first in {"passed", "runtime_error"} and second in {"wrong_answer", "runtime_error"}
    assert_clean(srv)


WRONG_ADD = "def add(a, b):\n    return a - b\n"
ADD_TESTS = "assert add(1, 2) == 3\nassert add(2, 2) == 4"


@pytest.mark.parametrize(
    "cheat",
    [
        "import sys\nsys.exit(0)",
        "import os\nos._exit(0)",
        "print('All tests passed!')\nprint('OK')\nimport sys\nsys.exit(0)",
        "def check(candidate):\n    pass",
        "import builtins\nbuiltins.AssertionError = type('Nope', (Exception,), {})",
        "import builtins\nbuiltins.__dict__['__debug__'] = False",
        "class Yes:\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n"
        "def add(a, b):\n    return Yes()",
        "class Int(int):\n    def __eq__(self, other): return True\n"
        "def add(a, b):\n    return Int(0)",
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "import gc, sys\nfor o in gc.get_objects():\n    pass\nprint('passed')",
    ],
    ids=["sys_exit", "os_exit", "fake_markers", "redefine_check", "patch_assertionerror",
         "patch_debug", "eq_always_true", "int_subclass", "kill_parent", "scan_memory"],
)
def test_assertion_cheats_fail(srv: ServerProcess, cheat: str) -> None:
    result = verify_one(srv, response=f"```python\n{WRONG_ADD}{cheat}\n```", test_code=ADD_TESTS,
                        entry_point="add")
    assert result["passed"] == 0 and result["score"] == 0.0, result
    assert result["total"] == 2
    assert_clean(srv)


def test_check_function_cheats_fail(srv: ServerProcess) -> None:
    test_code = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
    cheat = "import sys\nsys.modules['__main__'].check = lambda c: None\nsys.exit(0)"
    result = verify_one(srv, response=WRONG_ADD + cheat, test_code=test_code, entry_point="add")
    assert result["score"] == 0.0
    honest = verify_one(srv, response="def add(a, b):\n    return a + b", test_code=test_code,
                        entry_point="add")
    assert honest["score"] == 1.0
