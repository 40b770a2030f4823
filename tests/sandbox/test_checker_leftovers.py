"""What a wrong program leaves behind on a checker item (a stdin/stdout item judged by the
dataset's checker) must not make the item unscorable: once the candidate ran, nothing it can
cause is null (README: "Statuses, at two levels"). Through the real server, with a pool of
one container, under runc and under gVisor (tests/conftest.py's ``sandbox_runtime``).

The program below forks a child that leaves its session and process group (``setsid``), so
the per-test kill of the test's group misses it, and that child fills the container's pids
limit with sleeping processes before the program prints its (wrong) answer and exits. The
checker then could not start: the item was ``bad_tests`` (null), the null was cached for
identical copies, ``/v1/rewards`` answered ``[1.0, null]`` and ``/get_reward`` 503 on every
retry (runc). Under gVisor, whose pids limit counts its own host threads, as many processes
kill the container instead (runtime_error, 0, as before); there a checker that looks for the
candidate's processes shows that they are now killed before it runs (they were not).
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import ServerProcess, verify_code
from tests.helpers.checker import CHECKER, RIGHT, TESTS, WRONG
from tests.helpers.code import sandbox_server

pytestmark = pytest.mark.usefixtures("docker_ready")

# Under runc the pids limit (128) comes before FORKS; under gVisor, whose limit counts its own
# host threads (sandbox/config.py), this many processes kill the container, which scores 0.
# The child keeps taking every pid that frees up (the program's own, as it exits) for HOLD_S.
FORKS = 150
HOLD_S = 20


def leaving(forks: int) -> str:
    """A program's first lines: a child that leaves the program's session and group and
    starts ``forks`` sleeping processes (or as many as the pids limit allows, retrying)."""
    return f"""import os, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()  # its own session and group: the kill of the test's group misses it
    told, made, until = False, 0, time.monotonic() + {HOLD_S}
    while made < {forks} and time.monotonic() < until:
        try:
            if os.fork() == 0:
                time.sleep(600)
                os._exit(0)
            made += 1
        except OSError:  # the container's pids limit: tell the program, then try again
            if not told:
                os.write(w, b"x")
                told = True
            time.sleep(0.001)
    if not told:
        os.write(w, b"x")
    time.sleep(600)
    os._exit(0)
os.read(r, 1)  # the child has started what it could
"""


# A checker that rejects while any process of the candidate's uid (slate.CANDIDATE) runs
SPY = """import os, sys
left = 0
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/status") as f:
            uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
    except (OSError, StopIteration):
        continue
    left += "10001" in uids
print(left, "processes of the candidate's", file=sys.stderr)
sys.exit(1 if left else 0)
"""


# One container, so every item meets what the one before it left (the cache is on: an
# unscorable result must not be kept for the next copy)
srv = sandbox_server("checker-leftovers", {"REWARD_SERVER_SANDBOX_POOL_SIZE": "1"})


def test_processes_left_by_a_wrong_program_do_not_make_a_checker_item_null(
        srv: ServerProcess) -> None:
    checker = {"language": "cpp", "source": CHECKER}
    right = {"verifier": "code", "response": RIGHT, "tests": TESTS, "checker": checker}
    hostile = {"verifier": "code", "response": leaving(FORKS) + WRONG, "tests": TESTS,
               "checker": checker}
    with httpx.Client(base_url=srv.url, timeout=300) as c:
        for _ in range(2):  # the second time, the cache answers for what it kept
            r = c.post("/v1/rewards", json={"items": [right, hostile, hostile]})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["rewards"] == [1.0, 0.0, 0.0], body["results"]
            for result in body["results"][1:]:
                assert result["status"] == "ok", result
                statuses = [t["status"] for t in result["tests"]]
                if srv.runtime == "runc":  # judged: the checker ran
                    assert statuses == ["wrong_answer"] * 2, result
                else:  # the container died of the processes, the checker judged, or (on
                    # a loaded machine: a CI run beside the demo) the processes held gVisor's
                    # CPU past the time limit; each is the program's 0, never a null
                    assert set(statuses) <= {"wrong_answer", "runtime_error", "timeout"}, result
        # OpenRLHF's protocol answers 503 (retry) for an unscorable item: it must score it
        label = json.dumps({"tests": TESTS, "checker": checker})
        r = c.post("/get_reward", params={"verifier": "code"}, json={
            "query": ["Q: " + hostile["response"]], "prompts": ["Q: "], "labels": [label]})
        assert r.status_code == 200, r.text
        assert r.json()["rewards"] == [0.0], r.json()


def test_no_process_of_the_candidate_runs_beside_the_checker(srv: ServerProcess) -> None:
    """A right answer whose program left processes behind passes: they are killed before the
    checker runs, which sees none."""
    (result,) = verify_code(srv.url, {"response": leaving(3) + RIGHT, "tests": TESTS,
                                      "checker": {"language": "python", "source": SPY}})
    assert (result["status"], result["score"]) == ("ok", 1.0), result
    assert all("checker: 0 processes" in t["stderr"] for t in result["tests"]), result
