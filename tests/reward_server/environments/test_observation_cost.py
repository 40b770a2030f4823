"""What a large observation costs the event loop: handing its text to the socket, not
rendering it. A cell's output up to the session output limit (16 MiB) comes back as one
observation; OpenEnv's server rendered its frame on the loop (``model_dump_json``: 42-54 ms a
step of 13 MiB here, every other caller waiting), the server's episode renders it on a worker
thread, a piece at a time (reward_server/json_render.py). Measured as the CPU time of the
server's main thread, where the loop runs, against a control step that runs the same cell
but shows little of it; the machine's load does not inflate CPU time as it does the wall
clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reward_server.environments.models import CodeAction
from tests.conftest import ServerProcess, run_server, wait_for_sandbox
from tests.helpers.cpu import loop_cpu_s
from tests.helpers.environments import code_env

pytestmark = pytest.mark.usefixtures("docker_ready")

MIB = 1024 * 1024
OUTPUT = 13 * MIB
ROUNDS = 4
STEPS = 5  # a round's steps: the kernel counts a thread's CPU time in 10 ms ticks
# the same work in the sandbox either way; only the observation's size differs
LARGE = f"import sys\nsys.stdout.write('x' * {OUTPUT})"
CONTROL = f"import sys, io\nio.StringIO().write('x' * {OUTPUT})\nsys.stdout.write('x')"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("observation-cost"), startup_s=180,
                    env={"REWARD_SERVER_SANDBOX_SESSION_OUTPUT_LIMIT_BYTES": str(16 * MIB)}
                    ) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        yield server


def test_a_large_observation_is_rendered_off_the_loop(srv: ServerProcess) -> None:
    spent: dict[str, list[float]] = {"large": [], "control": []}
    with code_env(srv) as env:
        env.reset()
        for _ in range(ROUNDS):  # interleaved: whatever else the loop does falls on both
            for name, code in (("large", LARGE), ("control", CONTROL)):
                before = loop_cpu_s(srv)
                for _ in range(STEPS):
                    observation = env.step(CodeAction(code=code)).observation
                    assert observation.status == "Success", observation.message
                    assert len(observation.stdout) == (OUTPUT if name == "large" else 1)
                spent[name].append((loop_cpu_s(srv) - before) / STEPS)
    # rendered on the loop, the large step cost it 42-44 ms more than the control here;
    # handed over, 8-10 ms are left: uvicorn encoding the text and writing it out. The least
    # of each: the loop's other work only adds to a round
    extra = min(spent["large"]) - min(spent["control"])
    assert extra < 0.02, spent
