"""A copy of a program another execution is compiling waits for that build holding no
container, and only until the build is made, not until its maker's last test.

Two containers. Caller A sends a C++ program with eight slow tests; once A holds a container,
caller B sends the same program with one test. B used to take the second container and wait
in it, holding it, for A's build, which was handed on after A's last test: B answered after
A (in the audit, 40.8 s against B's budget of 8 s). Now A's build is handed on with A's first
reply (the end of its first turn) and B waits for it outside the gate: B answers first. Order
is read from events, never from the clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from reward_server.testing import A, B, one_container_server
from tests.conftest import ServerProcess
from tests.helpers.turns import hold_then_arrive

pytestmark = pytest.mark.usefixtures("docker_ready")

SLOW_ECHO = ("```cpp\n#include <chrono>\n#include <cstdio>\n#include <thread>\n"
             "int main() { long x; if (scanf(\"%ld\", &x) != 1) return 1;\n"
             "  std::this_thread::sleep_for(std::chrono::milliseconds(700));\n"
             "  printf(\"%ld\\n\", x); }\n// TAG\n```")


@pytest.fixture(scope="module")
def two_containers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with one_container_server(tmp_path_factory.mktemp("build-waits"),
                              {"REWARD_SERVER_SANDBOX_POOL_SIZE": "2"}) as srv:
        yield srv


def test_a_copy_waits_for_the_build_not_for_its_makers_last_test(
        two_containers: ServerProcess) -> None:
    url = two_containers.url
    source = SLOW_ECHO.replace("TAG", str(time.time_ns()))
    maker = {"language": "cpp", "response": source,
             "tests": [{"input": str(k), "output": str(k)} for k in range(8)]}
    copy = {"language": "cpp", "response": source, "tests": [{"input": "42", "output": "42"}]}
    first, second, finished = hold_then_arrive(url, maker, copy)
    assert (first["status"], first["score"]) == ("ok", 1.0), first
    assert (second["status"], second["score"]) == ("ok", 1.0), second
    assert finished == [B, A], finished
