"""One caller cannot fill the ``/checkers`` tmpfs, which every caller's kept checkers share
(sandbox/harness/checker.py), so that another caller's checker cannot build. Through the real
server with a pool of one container (and its spare) and the result cache on, under runc and
gVisor (tests/conftest.py's ``sandbox_runtime``).

Alice keeps 44 MB of compiled checkers of her own, sends one reasoning_gym item (its scoring
job rebased the clean slate's "fresh" memory level with her kept checkers counted in, so the
memory check no longer replaced the container), then keeps more, down to a few KiB free.
Bob's correct item with a C++ checker he had not sent before came back ``bad_tests`` (null:
"the checker does not compile ... No space left on device"), and that null was cached for
every caller. Now a checker over ``KEEP_MAX_BYTES`` is not kept, a build first evicts kept
checkers until ``BUILD_ROOM_BYTES`` are free, the rebase leaves kept checkers out of the fresh
level, and a build that fails for want of space is never cached.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sandbox.harness.checker import BUILD_ROOM_BYTES, KEEP_MAX_BYTES
from tests.conftest import (
    SandboxRuntime,
    ServerProcess,
    run_server,
    sandbox_containers,
    wait_for_sandbox,
)

TOKENS = {"alice": "alice-" + "1" * 32, "bob": "bob-" + "2" * 32}

# Bob's checker: the output's number must be the answer's
BOB_CHECKER = r"""
#include <fstream>
#include <iostream>
int main(int argc, char** argv) {
    std::ifstream out(argv[2]), ans(argv[3]);
    long long a, b;
    if (!(out >> a)) { std::cerr << "no number"; return 1; }
    ans >> b;
    if (a != b) { std::cerr << "expected " << b << " got " << a; return 1; }
    return 0;
}
"""
RG_ITEM = {"verifier": "reasoning_gym", "response": "<answer>-4</answer>",
           "entry": {"question": "Calculate 5 - 3 - 6.", "answer": "-4",
                     "metadata": {"source_dataset": "basic_arithmetic"}}}


def bob_item(tag: str) -> dict[str, Any]:
    """A correct item whose checker (new: ``tag``) must compile in the container."""
    return {"verifier": "code", "response": "a, b = map(int, input().split())\nprint(a + b)",
            "tests": [{"input": "2 3", "output": "5"}],
            "checker": {"language": "cpp", "source": BOB_CHECKER + f"// {tag}\n"}}


def alice_item(checker: dict[str, str]) -> dict[str, Any]:
    return {"verifier": "code", "response": "print(int(input()) + 1)",
            "tests": [{"input": "1", "output": "2"}], "checker": checker}


def big_cpp(mb: float, tag: str) -> dict[str, str]:
    """A C++ checker that accepts, whose binary holds ``mb`` MB of initialised data."""
    return {"language": "cpp", "source": (
        f"static volatile char big[{int(mb * 1024 * 1024)}] = {{1}};\n"
        f"int main() {{ return big[0] == 1 ? 0 : 1; }} // {tag}\n")}


def padded_python(kib: int, tag: str) -> dict[str, str]:
    """A Python checker that accepts, its source padded to ``kib`` KiB (kept as it is)."""
    return {"language": "python",
            "source": "# " + "x" * max(0, kib * 1024 - 200) + f"\nimport sys\nsys.exit(0)  # {tag}\n"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory,
        sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
    path = tmp_path_factory.mktemp(f"checker-room-{sandbox_runtime.name}")
    tokens = path / "tokens"
    tokens.write_text("".join(f"{name}:{token}\n" for name, token in TOKENS.items()))
    os.chmod(tokens, 0o600)
    env = {**sandbox_runtime.env, "REWARD_SERVER_SANDBOX_POOL_SIZE": "1",
           "REWARD_SERVER_API_TOKENS_FILE": str(tokens)}
    with run_server(path, env=env, startup_s=180) as server:
        wait_for_sandbox(server.url, timeout_s=180,
                         headers={"Authorization": f"Bearer {TOKENS['alice']}"})
        yield server


def rewards(srv: ServerProcess, who: str, *items: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.Client(base_url=srv.url, timeout=600,
                      headers={"Authorization": f"Bearer {TOKENS[who]}"}) as c:
        r = c.post("/v1/rewards", json={"items": list(items)})
    assert r.status_code == 200, r.text
    return r.json()["results"]


def free_kib(srv: ServerProcess) -> list[int]:
    """KiB free on ``/checkers`` in each of the server's containers."""
    import docker

    client = (docker.DockerClient(base_url=srv.docker_host) if srv.docker_host
              else docker.from_env())
    free = []
    try:
        for found in sandbox_containers(srv.proc.pid, srv.docker_host):
            if found["status"] != "running":
                continue
            out = client.containers.get(found["id"]).exec_run(["df", "-k", "/checkers"])
            if out.exit_code == 0:
                free.append(int(out.output.decode().splitlines()[-1].split()[3]))
    finally:
        client.close()
    return free


def test_a_caller_cannot_fill_the_checkers_tmpfs_for_another(srv: ServerProcess) -> None:
    tag = str(time.time_ns())
    (before,) = rewards(srv, "bob", bob_item("before " + tag))
    assert (before["status"], before["score"]) == ("ok", 1.0), before
    for i, mb in enumerate([15, 15, 14]):
        (kept,) = rewards(srv, "alice", alice_item(big_cpp(mb, f"a{i} {tag}")))
        assert kept["score"] == 1.0, kept
    (scored,) = rewards(srv, "alice", RG_ITEM)  # its scoring job rebases the clean slate
    assert scored["score"] == 1.0, scored
    for i, mb in enumerate([9.5, 5]):
        (kept,) = rewards(srv, "alice", alice_item(big_cpp(mb, f"b{i} {tag}")))
        assert kept["score"] == 1.0, kept
    for i in range(3):  # as full as Python sources fill it, down to a few KiB free
        free = min(free_kib(srv) or [0])
        kib = min(2000, free - 24) if i < 2 else free - 2
        if kib > 0:
            rewards(srv, "alice", alice_item(padded_python(kib, f"c{i} {tag}")))

    item = bob_item("after " + tag)
    for _ in range(2):  # the second time: whatever the cache kept of the first
        (after,) = rewards(srv, "bob", item)
        assert (after["status"], after["score"]) == ("ok", 1.0), after
    # what a build leaves: its room, less one kept checker at most
    assert min(free_kib(srv)) * 1024 >= BUILD_ROOM_BYTES - KEEP_MAX_BYTES, free_kib(srv)
