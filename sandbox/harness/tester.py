"""The test process of an assertion job: a caller's trusted code, in a process of its own.

An assertion job's test code, ``test_setup``, ``check`` and a prompt come from the caller,
and the container serves the next caller after it. Run in the harness (PID 1, root), that
code could patch the harness and make every later item pass, or read what earlier jobs left
in its memory. So each job's test code runs in a *tester*: forked from the pristine fork
server (``zygote``: it never held a job), under a uid of its own (``slate.TESTER``) with no
capability, and gone with the job (``slate.sweep``). What it needs of root goes through
PID 1 on the *relay*, a socket only the two hold:

- the solution's process: before dropping root the tester forks a fork server of its own
  (the zygote's loop, still pristine), whose children drop to the candidate's uid; with no
  such server the tester never starts the solution in another way (it would run under the
  tester's uid, and could trace it);
- killing the solution (``kill``): PID 1 kills every process of the candidate's uid;
- the result, which PID 1 checks and keeps to the shape a result has.

The job's clocks run in the tester (its trusted code's ``SIGALRM``, its turn), which test
code can stop. So PID 1 keeps the turn too: a tester still running past its turn's end
(``unsplit_s`` from the start: the job has one, ``turns``) plus a grace is killed, and holds
a container no longer than one test may.

The tester can forge only its own job's result, which its own test code decides anyway.
"""

from __future__ import annotations

import math
import socket
import time

from . import processes, slate
from .protocol import JOB_FRAME_BYTES, recv_frame, send_frame
from .statuses import BAD_TESTS, EXECUTION_STATUSES, HARNESS_ERROR, OK, TEST_STATUSES
from .turns import TRUSTED_GRACE_S

RESULT_FRAME_BYTES = 16 * 1024 * 1024
# Past the job's own deadline, the test process's trusted clocks still get their grace, and
# its last frame time to arrive
SLACK_S = 10.0
RESULT_KEYS = {"status", "detail", "tests"}
# Past the end of its turn, the tester's own clock stops a test's trusted code after
# ``TRUSTED_GRACE_S``; then its result frame has this long to arrive
TURN_SLACK_S = 2.0
TEST_KEYS = {"status", "time_ms", "stderr"}


# --- PID 1's side -----------------------------------------------------------------------------


def run_tested(job, workdir, env, zygote):
    """Run the assertion job in a tester forked from ``zygote``; its result, checked."""
    if zygote is None or not zygote.alive():
        return {"status": HARNESS_ERROR, "detail": "no fork server to run the test code in"}
    relay, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            zygote.tester(theirs.fileno())
        except (OSError, EOFError, ValueError, KeyError) as exc:
            return {"status": HARNESS_ERROR, "detail": f"the test process did not start: {exc}"}
        finally:
            theirs.close()
        send_frame(relay.fileno(), {"job": job, "workdir": workdir, "env": env})
        result, theirs = _relay(relay.fileno(), job)
        return checked(result) if theirs else result
    finally:
        relay.close()
        slate.kill_user(slate.TESTER[0])


def _relay(fd, job):
    """Serve the tester's requests until its result: (its result, True); else (what the job
    came to, False)."""
    deadline = job["deadline"] + SLACK_S
    grace = TRUSTED_GRACE_S + TURN_SLACK_S
    turn_end = time.monotonic() + job["unsplit_s"] + grace if job.get("unsplit_s") else math.inf
    started = False
    while True:
        try:
            until = min(deadline, turn_end)
            frame = recv_frame(fd, None if math.isinf(until) else until,
                               max_bytes=RESULT_FRAME_BYTES)
            if not isinstance(frame, dict):
                raise ValueError("not an object")
        except (TimeoutError, EOFError, OSError, ValueError, RecursionError) as exc:
            return lost(started, exc), False
        if "result" in frame:
            return frame["result"], True
        if frame.get("op") == "started":  # the solution's process is about to start
            started = True
            processes.candidate_started()
        elif frame.get("op") == "kill":
            slate.kill_user(slate.CANDIDATE[0])
            send_frame(fd, {"op": "killed"})
        else:
            return lost(started, ValueError(f"an unknown request {str(frame)[:100]}")), False


def lost(started, exc):
    """No result from the tester. Once the solution started, it may be the cause (a value it
    returned that the test process could not hold): its failure, a 0; before, the test
    code's (``bad_tests``, a null)."""
    why = f"{type(exc).__name__}: {exc}"[:300]
    if started:
        return {"status": OK, "tests": [], "candidate_failed": True,
                "detail": f"the test process ended without a result: {why}"}
    return {"status": BAD_TESTS,
            "detail": f"the test code's process ended before the solution loaded: {why}"}


def checked(result):
    """The tester's result, kept to a result's shape: known keys, statuses and types only."""
    if not isinstance(result, dict) or not set(result) <= RESULT_KEYS or (
            result.get("status") not in EXECUTION_STATUSES):
        return {"status": BAD_TESTS, "detail": "the test process sent a malformed result"}
    tests = result.get("tests", [])
    if not isinstance(tests, list) or not all(
            isinstance(t, dict) and set(t) <= TEST_KEYS and t.get("status") in TEST_STATUSES
            and isinstance(t.get("time_ms", 0.0), (int, float))
            and isinstance(t.get("stderr", ""), str) for t in tests):
        return {"status": BAD_TESTS, "detail": "the test process sent malformed tests"}
    # the harness's own failure is PID 1's to report (the host retries it in another
    # container): from the tester, whose test code may say anything, it is the test code's
    out = {"status": BAD_TESTS if result["status"] == HARNESS_ERROR else result["status"]}
    if "tests" in result:
        out["tests"] = tests
    if isinstance(result.get("detail"), str):
        out["detail"] = result["detail"]
    return out


# --- the tester's side ------------------------------------------------------------------------


class Relay:
    """The tester's end: requests to PID 1, each answered before the next."""

    def __init__(self, fd):
        self.fd = fd

    def request(self, op, reply=None):
        send_frame(self.fd, {"op": op})
        if reply is None:
            return None
        answer = recv_frame(self.fd)
        if not isinstance(answer, dict) or answer.get("op") != reply:
            raise EOFError("PID 1 broke the relay")
        return answer

    def kill(self, process=None):
        try:
            self.request("kill", "killed")
        except (OSError, EOFError, ValueError):
            pass


def serve_tester(relay_fd):
    """In the zygote's child, still root: fork this job's own fork server, drop to the
    tester's uid, then read the job from PID 1 and run it. Exits with the job."""
    from .asserts import run_asserts
    from .candidate import Candidate
    from .zygote import ForkedZygote

    processes.private_sink(1, 2)  # what the test code prints
    own = ForkedZygote.fork()
    slate.drop_privileges(slate.TESTER)
    processes.make_undumpable()  # the uid change may reset it
    relay = Relay(relay_fd)
    message = recv_frame(relay_fd, max_bytes=JOB_FRAME_BYTES)
    job = message["job"]
    processes.KILLER = relay.kill
    Candidate.on_start = staticmethod(lambda: relay.request("started"))
    Candidate.forks_only = True
    try:
        result = run_asserts(job, message["workdir"], message["env"], own)
    except Exception as exc:  # noqa: BLE001 - the harness's own failure, said as one
        result = {"status": HARNESS_ERROR, "detail": f"{type(exc).__name__}: {exc}"[:500]}
    send_frame(relay_fd, {"result": result})
