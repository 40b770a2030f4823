"""gVisor as the engine's default runtime, the runtime setting unset: its containers get what
gVisor's containers get when the setting names it (its seccomp variant, its pids limit), however
the operator named it. Under gVisor the runc profile leaves POSIX message queues open, whose
names gVisor keeps between executions (it has no /dev/mqueue the harness could empty), and
runc's pids limit is too small for gVisor's own host threads."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import httpx
import pytest

from sandbox.config import SandboxConfig
from sandbox.testing import RUNSC_ALIAS
from tests.conftest import run_server, wait_for_sandbox

# mq_open(NULL, ...) by number: EFAULT where the call is allowed, EPERM where the profile
# denies it
MQ_OPEN = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "libc.syscall(ctypes.c_long(240), *[ctypes.c_long(0)] * 4)\n"
           "print(ctypes.get_errno())")


@pytest.mark.parametrize("name", ["runsc", RUNSC_ALIAS])
def test_gvisor_left_to_the_engine_gets_gvisors_profile_and_limits(
        extra_engine, tmp_path: Path, name: str) -> None:
    if extra_engine.runsc is None:
        message = "gVisor's runsc is not installed; run: bash sandbox/ensure_runsc.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    env = {"REWARD_SERVER_SANDBOX_DOCKER_HOST": extra_engine.host,
           "REWARD_SERVER_SANDBOX_POOL_SIZE": "1"}
    with extra_engine.default_runtime(name), run_server(tmp_path, env=env) as srv, \
            httpx.Client(base_url=srv.url, timeout=120) as c:
        wait_for_sandbox(srv.url)
        ran = c.post("/run_code", json={"code": MQ_OPEN, "language": "python"}).json()
        scored = c.post("/v1/rewards", json={"items": [
            {"verifier": "code", "response": f"```python\n{MQ_OPEN}\n```",
             "tests": [{"input": "", "output": f"{errno.EPERM}\n"}]}]}).json()
        session = c.post("/v1/sessions", json={}).json()
        cell = c.post(f"/v1/sessions/{session['session_id']}/run",
                      json={"code": MQ_OPEN}).json()
        inspected = extra_engine.docker(
            "inspect", "--format", "{{.HostConfig.Runtime}} {{.HostConfig.PidsLimit}}",
            *extra_engine.sandbox_containers(running=True)).stdout.splitlines()
        c.delete(f"/v1/sessions/{session['session_id']}")
    assert ran["run_result"]["stdout"] == f"{errno.EPERM}\n", ran  # was EFAULT: allowed
    assert cell["cells"][0]["stdout"] == f"{errno.EPERM}\n", cell
    assert scored["rewards"] == [1.0], scored  # the code verifier's programs too
    assert set(inspected) == {f"{name} {SandboxConfig().gvisor_pids_limit}"}, inspected
    assert ran["provenance"]["runtime"] == session["provenance"]["runtime"] == name
    # its verdicts name the runtime too: under runc this one scores 0
    assert scored["provenance"]["code"]["sandbox_runtime"] == name
