"""``POST /run_jupyter`` through the real server and Docker engine, under runc and gVisor,
called by SandboxFusion's own client package (``sandbox_fusion``, sync and async) with only its
endpoint pointed here, beside its ``run_code`` calls: cells run in order in one fresh
interpreter that shares their state, each cell's stdout, stderr, display and error as their
client parses them, files in and out. A run's interpreter is its own (the next run, and
another caller, meet nothing of it) and its container is gone when the answer comes. Hostile
cells (a loop, a fork bomb, a memory hog, a flood, a total_timeout spent) are each stopped by
their own limit while a benign run beside them is answered; the session caps hold it; and the
code verifier's isolation probes (tests/helpers/probes.py) run in its cells."""

from __future__ import annotations

import asyncio
import base64
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import sandbox_fusion
from sandbox_fusion import RunCodeRequest, RunJupyterRequest, RunStatus

from reward_server.run_code.cell_answer import answer_bytes
from reward_server.run_code.session_schemas import CellRunResult
from sandbox.config import MIN_MEMORY_MB
from tests.conftest import ServerProcess
from tests.helpers import probes
from tests.helpers.code import sandbox_server
from tests.helpers.metrics import metric
from tests.helpers.sandbox_pool import POOL, assert_clean
from tests.helpers.sessions import session_containers
from tests.helpers.waiting import eventually

# what the server does around the sandbox: under gVisor too only where marked isolation
pytestmark = [pytest.mark.usefixtures("docker_ready"), pytest.mark.host_side]

OUTPUT_LIMIT = 65536
PER_CALLER = 2
SETTINGS = {"REWARD_SERVER_SANDBOX_POOL_SIZE": str(POOL),
            "REWARD_SERVER_SANDBOX_SESSION_MAX_PER_CALLER": str(PER_CALLER),
            "REWARD_SERVER_SANDBOX_SESSION_OUTPUT_LIMIT_BYTES": str(OUTPUT_LIMIT),
            # 127.0.0.1 stands for a proxy: the callers it names are hosts elsewhere
            "REWARD_SERVER_FORWARDED_ALLOW_IPS": "127.0.0.1"}
# SandboxFusion's own example (its RunJupyterRequest's), each cell one kind of output
EXAMPLE = ["a = 123", "a", "print(a)", 'import sys; sys.stderr.write("stderr message")',
           'raise RuntimeError("error message")', "a + 1"]

SESSIONS_OPEN = "reward_sessions_open"  # a run's interpreter is a session, never listed

srv = sandbox_server("run-jupyter", SETTINGS, startup_s=180)


def post(srv: ServerProcess, caller: str | None = None, **body: Any) -> httpx.Response:
    """``POST /run_jupyter`` as ``caller`` (a host the trusted proxy names), or loopback."""
    headers = {"X-Forwarded-For": caller} if caller else {}
    with httpx.Client(base_url=srv.url, timeout=180, headers=headers) as c:
        return c.post("/run_jupyter", json=body)


def run(srv: ServerProcess, caller: str | None = None, **body: Any) -> dict[str, Any]:
    r = post(srv, caller, **body)
    assert r.status_code == 200, r.text
    return r.json()


def assert_example(cells: list[Any]) -> None:
    """SandboxFusion's example cells, as their client's models hold them."""
    assert [c.stdout for c in cells] == ["", "", "123\n", "", "", ""]
    assert cells[3].stderr == "stderr message"
    assert cells[1].display == [{"text/plain": "123"}]
    assert cells[5].display == [{"text/plain": "124"}]  # the run went on past the exception
    (error,) = cells[4].error
    assert (error["ename"], error["evalue"]) == ("RuntimeError", "error message")
    assert "RuntimeError" in "".join(error["traceback"])


def test_sandbox_fusion_client_sync(srv: ServerProcess) -> None:
    """Their client's run_jupyter, and their run_code beside it: a cell's exception is in its
    cell, and the run is a Success, as their server answers it."""
    data = base64.b64encode(b"\x00\xffdata").decode()
    got = sandbox_fusion.run_jupyter(RunJupyterRequest(
        cells=[*EXAMPLE, "open('out.bin', 'wb').write(open('in.bin', 'rb').read())"],
        files={"in.bin": data}, fetch_files=["out.bin"]), endpoint=srv.url, max_attempts=1)
    assert got.status == RunStatus.Success, got
    assert got.driver is not None and got.driver.status == "Finished"
    assert_example(got.cells[:6])
    assert got.files == {"out.bin": data}
    code = sandbox_fusion.run_code(RunCodeRequest(code="print(6 * 7)", language="python"),
                                   endpoint=srv.url, max_attempts=1)
    assert code.status == RunStatus.Success and code.run_result.stdout == "42\n"


async def test_sandbox_fusion_client_async(srv: ServerProcess) -> None:
    """Their async client: two runs and a run_code at once, each interpreter its own."""
    runs = [sandbox_fusion.run_jupyter_async(RunJupyterRequest(cells=[f"x = {n}", "x * 2"]),
                                             endpoint=srv.url, max_attempts=1)
            for n in (1, 2)]
    code = sandbox_fusion.run_code_async(RunCodeRequest(code="print(1)", language="python"),
                                         endpoint=srv.url, max_attempts=1)
    first, second, ran = await asyncio.gather(*runs, code)
    assert [r.cells[1].display for r in (first, second)] == [[{"text/plain": "2"}],
                                                             [{"text/plain": "4"}]]
    assert ran.run_result.stdout == "1\n"
    got = await sandbox_fusion.run_jupyter_async(RunJupyterRequest(cells=EXAMPLE),
                                                 endpoint=srv.url, max_attempts=1)
    assert got.status == RunStatus.Success
    assert_example(got.cells)


# What a run could leave for a later one (a file, a global, an environment variable, a
# process), and a probe for each
LEAVE = ("import os, subprocess\nopen('left.txt', 'w').write('x')\nos.environ['LEFT'] = '1'\n"
         "left = 1\nsubprocess.Popen(['sleep', '100'], start_new_session=True)")
LOOK = ("import os\nprint(sorted(os.listdir('.')), os.environ.get('LEFT'), 'left' in globals(),"
        " len([p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid() and "
        "os.stat(f'/proc/{p}').st_uid == os.getuid()]))")


@pytest.mark.isolation
def test_each_run_is_a_fresh_interpreter_removed_after(srv: ServerProcess) -> None:
    mine = run(srv, cells=[LEAVE, LOOK])
    assert mine["cells"][1]["stdout"] == "['left.txt'] 1 True 1\n", mine  # the probe sees it
    eventually(lambda: session_containers(srv) == [], what="its container removed")
    later = run(srv, "203.0.113.9", cells=[LOOK])
    assert later["cells"][0]["stdout"] == "[] None False 0\n", later
    assert_clean(srv)


@pytest.mark.isolation
def test_a_run_is_never_listed_as_a_session(srv: ServerProcess) -> None:
    """While its cell runs, its caller's session list is empty: the run's interpreter has no
    id to list, use or close. Its container is looked for (by listing each container's
    processes) only once the server counts the run's session open: under gVisor that listing
    is an exec into the container, and an exec into one not yet checked by its harness is a
    process the harness finds there, so the server refuses the container as unclean (a 503).
    Under gVisor the cell runs long enough for the exec-per-container listing on a loaded
    machine."""
    sleep_s = 8 if srv.runtime == "runc" else 30
    body = {"cells": [f"import time\ntime.sleep({sleep_s})", "'done'"],
            "cell_timeout": sleep_s + 20, "total_timeout": sleep_s + 40}
    assert metric(srv.url, SESSIONS_OPEN) == 0
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(post, srv, **body)
        eventually(lambda: metric(srv.url, SESSIONS_OPEN) == 1 or running.done(),
                   what="the run's session open")
        assert not running.done(), running.result().text
        eventually(lambda: session_containers(srv) != [] or running.done(),
                   what="the run's container seen")
        assert not running.done(), ("the run ended before its container was seen",
                                    running.result().text)
        r = httpx.get(srv.url + "/v1/sessions", timeout=10)
        assert r.status_code == 200 and r.json() == [], r.text
        answer = running.result()
        assert answer.status_code == 200, answer.text
        assert answer.json()["cells"][1]["display"] == [{"text/plain": "'done'"}]


@pytest.mark.isolation
def test_fetch_files_reads_as_the_cells_user_no_link_followed(srv: ServerProcess) -> None:
    made = ("import os\nopen('out.txt', 'w').write('made')\n"
            "os.symlink('/proc/self/maps', 'maps')\nos.symlink('out.txt', 'alias')\n"
            "os.mkfifo('fifo')\nos.mkdir('dir')")
    got = run(srv, cells=[made], files={"skipped.txt": None},
              fetch_files=["out.txt", "maps", "alias", "fifo", "dir", "absent.txt"])
    assert got["status"] == "Success", got
    assert got["files"] == {"out.txt": base64.b64encode(b"made").decode()}
    for name in ("maps", "alias", "fifo", "dir", "absent.txt"):
        assert f"fetch_files {name!r}: " in got["message"], (name, got["message"])
    assert "symbolic link" in got["message"]


def test_limits_are_capped_and_reported(srv: ServerProcess) -> None:
    got = run(srv, cells=["1"], cell_timeout=1000, total_timeout=10_000,
              memory_limit_MB=100_000)
    assert got["limits"]["cell_timeout"] == 60.0  # session_max_cell_timeout_s
    assert got["limits"]["total_timeout"] == 120.0  # session_max_total_timeout_s
    assert got["limits"]["memory_limit_MB"] == 768  # max_memory_mb
    assert got["limits"]["output_limit_bytes"] == OUTPUT_LIMIT


@pytest.mark.isolation
def test_the_memory_floor_starts_the_interpreter(srv: ServerProcess) -> None:
    """The least memory a caller may ask for starts the interpreter under either runtime
    (below it, it did not: a 503 SandboxError blamed on the sandbox, now the caller's 422)."""
    got = run(srv, cells=["import json, decimal, statistics", "len([0] * 10**6)"],
              memory_limit_MB=MIN_MEMORY_MB)
    assert got["status"] == "Success", got
    assert got["cells"][1]["display"] == [{"text/plain": "1000000"}]
    assert got["limits"]["memory_limit_MB"] == MIN_MEMORY_MB


SANDBOX_ERRORS = r'reward_items_total\{status="SandboxError",verifier="run_jupyter"\}'


def test_the_callers_own_mistakes_are_never_sandbox_errors(srv: ServerProcess) -> None:
    """A memory below the floor, and files the harness could not write (a NUL, a name past
    PATH_MAX, 3000 levels, a file that is a directory too): each was a 503 SandboxError, a
    container spent and the sandbox's error count raised; each is a 422 naming the field."""
    before = metric(srv.url, SANDBOX_ERRORS)
    bodies = [{"memory_limit_MB": 8}, {"files": {"a\0b": ""}}, {"files": {"a" * 5000: ""}},
              {"files": {"d/" * 3000 + "f": ""}}, {"files": {"a": "", "a/b": ""}}]
    for body in bodies:
        r = post(srv, cells=["1"], **body)
        assert r.status_code == 422, r.text[:300]
        assert r.json()["detail"].startswith(next(iter(body))), r.json()
    assert metric(srv.url, SANDBOX_ERRORS) == before


def test_the_session_caps_hold_it(srv: ServerProcess) -> None:
    """A run holds a container as a session does, so a caller holding its cap of sessions
    gets a 429 with Retry-After, and its run once one is closed; other callers are not held
    up by it."""
    caller = "198.51.100.7"
    with httpx.Client(base_url=srv.url, timeout=180, headers={"X-Forwarded-For": caller}) as c:
        ids = []
        for _ in range(PER_CALLER):
            r = c.post("/v1/sessions", json={})
            assert r.status_code == 201, r.text
            ids.append(r.json()["session_id"])
        refused = c.post("/run_jupyter", json={"cells": ["1"]})
        assert refused.status_code == 429, refused.text
        assert "sandbox_session_max_per_caller" in refused.json()["detail"]
        assert int(refused.headers["retry-after"]) >= 1
        assert run(srv, "198.51.100.8", cells=["1"])["status"] == "Success"
        assert c.delete(f"/v1/sessions/{ids.pop()}").status_code == 200
        assert c.post("/run_jupyter", json={"cells": ["1"]}).status_code == 200
        for session_id in ids:
            c.delete(f"/v1/sessions/{session_id}")


HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    # name: (request, what its message must hold); each with limits of its own
    "loop": ({"cells": ["x = 1", "while True:\n    pass", "x"], "cell_timeout": 2},
             "cells[1]: stopped at the cell's time limit of 2 s"),
    "total": ({"cells": ["while True:\n    pass", "1"], "cell_timeout": 30,
               "total_timeout": 2}, "(what was left of total_timeout 2 s)"),
    "fork": ({"cells": ["import os\nwhile True:\n    os.fork()", "1"], "cell_timeout": 3},
             "cells[0]: "),
    "memory": ({"cells": ["xs = []\nwhile True:\n    xs.append(bytearray(10 * 1024**2))",
                          "del xs\n1 + 1"], "memory_limit_MB": 128}, ""),
    "flood": ({"cells": ["import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", "1"]},
              f"cells[0]: stopped at the output limit of {OUTPUT_LIMIT} bytes"),
}


@pytest.mark.isolation
def test_hostile_runs_contained_beside_a_benign_one(srv: ServerProcess) -> None:
    """Each from a caller of its own (the caps are per caller), all at once."""
    with ThreadPoolExecutor(len(HOSTILE) + 1) as pool:
        hostile = {name: pool.submit(run, srv, f"192.0.2.{i + 10}", **body)
                   for i, (name, (body, _)) in enumerate(HOSTILE.items())}
        benign = pool.submit(run, srv, "192.0.2.99", cells=["n = 20", "n + 22"]).result()
        assert benign["status"] == "Success", benign
        assert benign["cells"][1]["display"] == [{"text/plain": "42"}]
        got = {name: future.result() for name, future in hostile.items()}
    for name, (_, message) in HOSTILE.items():
        assert message in got[name]["message"], (name, got[name])
    for name in ("loop", "total"):
        assert got[name]["status"] == "Failed", got[name]
        assert got[name]["cells"][-1]["status"] == "TimeLimitExceeded", got[name]
        assert got[name]["driver"]["status"] == "TimeLimitExceeded", got[name]
        assert len(got[name]["cells"]) == len(HOSTILE[name][0]["cells"]) - 1  # the last: not run
    assert got["total"]["limits"]["cell_timeout"] == 2
    assert got["fork"]["status"] == "Failed" and len(got["fork"]["cells"]) == 1, got["fork"]
    # an exception of its own (its address space's limit), as a notebook shows it: the
    # interpreter lives on to the next cell
    memory = got["memory"]
    assert memory["cells"][0]["error"][0]["ename"] == "MemoryError", memory
    assert memory["cells"][1]["display"] == [{"text/plain": "2"}], memory
    flood = got["flood"]
    assert flood["status"] == "Failed" and flood["cells"][0]["status"] == "Error", flood
    assert len(flood["cells"][0]["stdout"]) == OUTPUT_LIMIT
    assert flood["driver"]["status"] == "Error"
    eventually(lambda: session_containers(srv) == [], what="every run's container removed")
    assert_clean(srv)


def test_escaped_output_counts_against_the_answers_limit(srv: ServerProcess) -> None:
    """Cells that print NULs (six bytes each in the JSON answer): the cells past the answer's
    limit in bytes are not run, though their characters would have stayed under it, and the
    cell that reaches it is cut there (it came back whole: 17.0 MB against 16 MiB)."""
    cell = "import sys; sys.stdout.write('\\0' * 65000); sys.stderr.write('\\0' * 65000)"
    r = post(srv, cells=[cell] * 30)
    assert r.status_code == 200, r.text[:500]
    answer = r.json()
    limit = answer["limits"]["response_limit_bytes"]
    assert 30 * 2 * 65000 < limit < 30 * 2 * 65000 * 6  # as characters all 30 fit
    assert answer["status"] == "Failed", answer["message"]
    last = len(answer["cells"]) - 1
    assert 0 < last < 29, answer["message"]
    # 21 cells of 780 KB leave 397 KB: its stdout whole, its stderr cut
    assert f"cells[{last}].stderr: cut to its first bytes at the response limit of {limit} " \
        f"bytes ({6 * 65000} bytes)" in answer["message"], answer["message"]
    assert f"cells[{last + 1}:] not run" in answer["message"], answer["message"]
    cells = [CellRunResult.model_validate(c) for c in answer["cells"]]
    assert answer_bytes(cells) <= limit
    assert len(r.content) < limit + 16384  # the cells' other fields, the limits, the message


@pytest.mark.isolation
def test_no_network_outside_or_to_the_host(srv: ServerProcess) -> None:
    got = run(srv, cells=[probes.network_probe(srv.url.rsplit(":", 1)[1])])
    assert got["status"] == "Success", got
    assert got["cells"][0]["stdout"] == probes.NETWORK_EXPECTED + "\n"
    assert_clean(srv)


@pytest.mark.isolation
def test_no_writes_outside_the_work_dir_no_host_files(srv: ServerProcess) -> None:
    got = run(srv, cells=[probes.FILESYSTEM_PROBE])
    assert got["status"] == "Success", got
    assert got["cells"][0]["stdout"] == probes.filesystem_expected(srv.runtime) + "\n"
    assert_clean(srv)


@pytest.mark.isolation
def test_a_child_outliving_its_cell_goes_with_its_run(srv: ServerProcess) -> None:
    """A cell's background process lives on to the run's next cell (a notebook's would), and
    no further: the run's container is removed with it, and no container of the server, nor
    a later run, meets it."""
    got = run(srv, cells=[probes.CHILD_OUTLIVES, probes.THEIR_PROCESSES])
    assert got["cells"][0]["stdout"] == probes.CHILD_OUTLIVES_EXPECTED + "\n", got
    assert all(c in got["cells"][1]["stdout"] for c in probes.CHILD_COMMANDS), got
    eventually(lambda: session_containers(srv) == [], what="its container removed")
    later = run(srv, cells=[probes.THEIR_PROCESSES])
    assert later["cells"][0]["stdout"].split(" ", 1)[1] == "[]\n", later
    assert_clean(srv)  # every container left runs its harness and fork server only


@pytest.mark.isolation
def test_kill_everything(srv: ServerProcess) -> None:
    """kill(-1) in a cell spares the kernel and reaches nothing of root's (the harness, the
    fork server): the next cell sees the state; from a child of a cell it kills the kernel,
    and that run only is Failed, with the interpreter lost."""
    got = run(srv, cells=["y = 2", probes.KILL_EVERYTHING, "y"])
    cell = got["cells"][1]
    if probes.kill_everything_raises(srv.runtime):
        assert cell["error"][0]["ename"] == "ProcessLookupError", got
    else:
        assert cell["stdout"] == probes.KILL_EVERYTHING_EXPECTED + "\n", got
    assert got["status"] == "Success" and got["cells"][2]["display"] == [{"text/plain": "2"}]
    got = run(srv, cells=["import subprocess\n"
                          f"subprocess.run(['python3', '-c', {probes.KILL_EVERYTHING!r}])",
                          "1"])
    assert got["status"] == "Failed" and len(got["cells"]) == 1, got
    assert got["cells"][0]["status"] == "Error" and "exited (exit code -9)" in got["message"]
    assert httpx.get(srv.url + "/healthz", timeout=10).status_code == 200
    eventually(lambda: session_containers(srv) == [], what="its container removed")
    assert_clean(srv)


def test_metrics_count_run_jupyter(srv: ServerProcess) -> None:
    run(srv, cells=["1"])
    text = httpx.get(srv.url + "/metrics", timeout=10).text
    assert 'reward_items_total{status="Success",verifier="run_jupyter"}' in text
    assert 'reward_requests_total{code="200",route="/run_jupyter"}' in text
