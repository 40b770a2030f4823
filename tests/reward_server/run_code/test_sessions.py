"""Stateful sessions (``/v1/sessions``) through the real server on loopback and the real Docker
engine, under runc and gVisor: state kept across cells, sessions isolated from each other and
from other callers, the caps, the idle TTL freeing the container, looping and hostile cells
stopped by their own session's limits while another session answers, the code verifier's
isolation probes (tests/helpers/probes.py) held to the same expectations in a cell, nothing a
session leaves reaching another caller, and no container left behind when the server stops or
is killed."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from reward_server.testing import sandbox_containers
from tests.conftest import (
    SandboxRuntime,
    ServerProcess,
    run_server,
    wait_for_sandbox,
)
from tests.helpers import probes
from tests.helpers.sandbox_pool import assert_clean
from tests.helpers.sessions import session_containers
from tests.helpers.waiting import eventually

# what the server does around the sandbox: under gVisor too only where marked isolation
pytestmark = [pytest.mark.usefixtures("docker_ready"), pytest.mark.host_side]

POOL = 2  # warm containers (the verifier keeps one spare beside them)
MAX_OPEN, PER_CALLER = 4, 2
ANSWER_LIMIT = 65536  # the least it may be: one request's cells' output together
SETTINGS = {"REWARD_SERVER_SANDBOX_POOL_SIZE": str(POOL),
            "REWARD_SERVER_SANDBOX_SESSION_MAX_OPEN": str(MAX_OPEN),
            "REWARD_SERVER_SANDBOX_SESSION_MAX_PER_CALLER": str(PER_CALLER),
            "REWARD_SERVER_SANDBOX_SESSION_OUTPUT_LIMIT_BYTES": "65536",
            "REWARD_SERVER_SANDBOX_SNIPPET_RESPONSE_LIMIT_BYTES": str(ANSWER_LIMIT),
            # 127.0.0.1 stands for a proxy: the callers it names are hosts elsewhere
            "REWARD_SERVER_FORWARDED_ALLOW_IPS": "127.0.0.1"}
# Other callers: without tokens a caller is its client address (loopback answers the whole
# of 127/8), and the caps count every loopback address as one host (reward_server/callers.py)
OTHER, THIRD = "127.0.0.2", "127.0.0.3"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory,
        sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp(f"sessions-{sandbox_runtime.name}"),
                    env={**sandbox_runtime.env, **SETTINGS}, startup_s=180) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        yield server


def client(srv: ServerProcess, address: str = "127.0.0.1") -> httpx.Client:
    """A caller at ``address``: a loopback one connects from it, any other is named by the
    trusted proxy (X-Forwarded-For from 127.0.0.1)."""
    if address.startswith("127."):
        return httpx.Client(base_url=srv.url, timeout=120,
                            transport=httpx.HTTPTransport(local_address=address))
    return httpx.Client(base_url=srv.url, timeout=120, headers={"X-Forwarded-For": address},
                        transport=httpx.HTTPTransport(local_address="127.0.0.1"))


class Session:
    """One session through the API; closed on exit."""

    def __init__(self, srv: ServerProcess, address: str = "127.0.0.1", **create: Any) -> None:
        self.http = client(srv, address)
        r = self.http.post("/v1/sessions", json=create)
        assert r.status_code == 201, r.text
        self.info = r.json()
        self.id = self.info["session_id"]

    def run(self, code: str, **body: Any) -> dict[str, Any]:
        r = self.http.post(f"/v1/sessions/{self.id}/run", json={"code": code, **body})
        assert r.status_code == 200, r.text
        return r.json()

    def value(self, code: str) -> str:
        """The displayed value of a cell that must succeed."""
        got = self.run(code)
        assert got["status"] == "Success", got
        return got["cells"][0]["display"][0]["text/plain"]

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.delete(f"/v1/sessions/{self.id}")
        self.http.close()


@pytest.mark.isolation
def test_state_persists_across_cells(srv: ServerProcess) -> None:
    with Session(srv) as s:
        assert s.info["state"] == "open" and len(s.id) >= 32
        first = s.run("import math\nx = 41\ndef f(y):\n    return y * 2\nprint('hi')")
        assert first["status"] == "Success" and first["cells"][0]["stdout"] == "hi\n"
        assert first["cells"][0]["display"] == []
        assert s.value("x + 1") == "42"
        assert s.value("f(x), math.pi > 3") == "(82, True)"
        assert s.value("_") == "(82, True)"  # the last value, as a notebook keeps it
        raised = s.run("x = 7\nraise ValueError('no')")
        assert raised["status"] == "Failed" and "ValueError" in raised["message"]
        error = raised["cells"][0]["error"][0]
        assert (error["ename"], error["evalue"]) == ("ValueError", "no")
        assert '<cell-' in "".join(error["traceback"])
        assert s.value("x") == "7"  # what ran before the exception stays
        # SandboxFusion's run_jupyter fields: cells in order, in the same namespace
        r = s.http.post(f"/v1/sessions/{s.id}/run",
                        json={"cells": ["y = x * 3", "import sys; sys.stderr.write('e')", "y"]})
        got = r.json()
        assert got["status"] == "Success", got
        assert [c["status"] for c in got["cells"]] == ["Finished"] * 3
        assert got["cells"][1]["stderr"] == "e" and got["cells"][2]["display"] == [
            {"text/plain": "21"}]
        assert got["session"]["cells"] == 9


def test_files_and_bad_requests(srv: ServerProcess) -> None:
    with Session(srv, files={"data/helper.py": "WCA9IDU=", "skip": None}) as s:  # X = 5
        assert s.value("import sys; sys.path.append('data'); import helper; helper.X") == "5"
    with client(srv) as c:
        for body, field in [({"language": "cpp"}, "language"),
                            ({"files": {"../x": "AA=="}}, "files['../x']")]:
            r = c.post("/v1/sessions", json=body)
            assert r.status_code == 422 and field in r.json()["detail"], r.text
        # a lone surrogate, as JSON escapes it (no encoder on this side would send it)
        r = c.post("/v1/sessions", content=b'{"files": {"a\\ud800": "AA=="}}',
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert r.json()["detail"].startswith("files['a\\ud800']: not UTF-8"), r.text
        with Session(srv) as s:
            r = c.post(f"/v1/sessions/{s.id}/run", json={"code": "1", "cells": ["2"]})
            assert r.status_code == 422 and "exactly one of code" in r.text
            r = c.post(f"/v1/sessions/{s.id}/run", json={"cells": ["1", "#" * 3_000_000]})
            assert r.status_code == 413 and "cells[1]" in r.json()["detail"], r.text
            assert s.value("'still here'") == "'still here'"


@pytest.mark.isolation
def test_two_sessions_are_isolated(srv: ServerProcess) -> None:
    with Session(srv) as a, Session(srv) as b:
        a.run("secret = 1\nopen('mine.txt', 'w').write('a')")
        b.run("secret = 2")
        assert a.value("secret") == "1" and b.value("secret") == "2"
        assert b.value("import os; os.path.exists('mine.txt')") == "False"
        assert a.value("import os; os.path.exists('mine.txt')") == "True"
        assert b.value("import os; sorted(os.listdir('/work'))").count("'") == 2  # its dir only


def test_another_caller_cannot_reach_it(srv: ServerProcess) -> None:
    with Session(srv) as mine, client(srv, OTHER) as other:
        mine.run("x = 'mine'")
        unknown = other.get("/v1/sessions/" + "A" * len(mine.id))
        assert unknown.status_code == 404
        for method, path, body in [("GET", "", None), ("POST", "/run", {"code": "x"}),
                                   ("DELETE", "", None)]:
            r = other.request(method, f"/v1/sessions/{mine.id}{path}", json=body)
            assert r.status_code == 404, (method, r.text)
            assert r.json()["detail"].startswith("no session")
        assert other.get("/v1/sessions").json() == []
        assert mine.value("x") == "'mine'"  # untouched
    # closed by the with: its own caller now gets 410, the other still 404
    with client(srv) as again, client(srv, OTHER) as other:
        assert again.get(f"/v1/sessions/{mine.id}").status_code == 410
        assert "closed" in again.post(f"/v1/sessions/{mine.id}/run",
                                      json={"code": "x"}).json()["detail"]
        assert other.get(f"/v1/sessions/{mine.id}").status_code == 404


def test_caps_per_caller_and_server_wide(srv: ServerProcess) -> None:
    """Without tokens a caller's quota is its host: loopback addresses (any local process may
    use any) hold PER_CALLER sessions between them, an IPv6 /64 likewise; the server's last
    places are kept for callers that hold none; past either cap a 429 with Retry-After."""
    opened: list[Session] = []

    def refused(address: str, setting: str) -> None:
        with client(srv, address) as c:
            r = c.post("/v1/sessions", json={})
        assert r.status_code == 429 and setting in r.json()["detail"], (address, r.text)
        assert int(r.headers["retry-after"]) >= 1

    try:
        opened += [Session(srv, "127.0.0.1"), Session(srv, OTHER)]  # PER_CALLER of loopback
        for address in (THIRD, "127.0.0.4"):
            refused(address, "sandbox_session_max_per_caller")
        opened.append(Session(srv, "2001:db8::1"))
        refused("2001:db8::2", "sandbox_session_reserve")  # its /64 has one, 1 place is left
        opened.append(Session(srv, "192.0.2.1"))  # a caller with none takes the last place
        refused("198.51.100.7", "sandbox_session_max_open")
        opened.pop(0).__exit__()
        opened.append(Session(srv, "198.51.100.7"))  # a closed one's place is free again
    finally:
        for s in opened:
            s.__exit__()


def test_idle_ttl_closes_it_and_frees_the_container(srv: ServerProcess) -> None:
    with Session(srv, idle_ttl_s=2) as s:
        assert s.info["limits"]["idle_ttl_s"] == 2
        s.run("x = 1")
        mine = session_containers(srv)
        assert len(mine) == 1, mine  # its own container, out of the pool
        eventually(lambda: s.http.get(f"/v1/sessions/{s.id}").status_code == 410, 30,
                   "the session expired")
        assert "expired" in s.http.get(f"/v1/sessions/{s.id}").json()["detail"]
        eventually(lambda: mine[0] not in {c["id"] for c in sandbox_containers(
            srv.proc.pid, srv.docker_host)}, what="its container removed")
    text = httpx.get(srv.url + "/metrics", timeout=10).text
    assert 'reward_sessions_closed_total{reason="expired"}' in text


@pytest.mark.isolation
def test_a_looping_cell_is_interrupted_and_the_session_lives(srv: ServerProcess) -> None:
    with Session(srv) as s:
        s.run("x = 5")
        # the status says a time limit stopped it; the bound, well under the 60 s a cell may
        # ask for (session_max_cell_timeout_s), says it was not that one: a hang bound, not
        # a speed goal
        started = time.monotonic()
        got = s.run("while True:\n    x += 0", cell_timeout=1)
        assert time.monotonic() - started < 45
        cell = got["cells"][0]
        assert got["status"] == "Failed" and cell["status"] == "TimeLimitExceeded", got
        assert cell["error"][0]["ename"] == "KeyboardInterrupt"
        assert "time limit of 1 s" in got["message"] and got["session"]["state"] == "open"
        assert s.value("x") == "5"
        # one that will not be interrupted is killed, and the session with it
        got = s.run("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "while True:\n    pass", cell_timeout=1)
        assert got["cells"][0]["status"] == "TimeLimitExceeded"
        assert got["session"]["state"] == "lost" and "killed" in got["message"], got
        r = s.http.post(f"/v1/sessions/{s.id}/run", json={"code": "x"})
        assert r.status_code == 410 and "lost" in r.json()["detail"]


@pytest.mark.isolation
def test_an_interpreter_that_exits_loses_its_session(srv: ServerProcess) -> None:
    with Session(srv) as s:
        got = s.run("import os\nos._exit(3)")
        assert got["cells"][0]["status"] == "Error" and got["session"]["state"] == "lost"
        assert "exited (exit code 3)" in got["message"], got
        assert s.http.get(f"/v1/sessions/{s.id}").status_code == 410


HOSTILE: dict[str, tuple[str, dict[str, Any], str]] = {
    # name: (its caller, its session's request, its cell); each within its session's limits;
    # four hosts (the loopback addresses would be one caller, over its cap)
    "memory": ("192.0.2.1", {"memory_limit_MB": 128},
               "xs = []\nwhile True:\n    xs.append(bytearray(10 * 1024**2))"),
    "flood": ("192.0.2.3", {}, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"),
    "fork": ("192.0.2.4", {}, "import os\nwhile True:\n    os.fork()"),
}


@pytest.mark.isolation
def test_hostile_cells_are_contained_beside_another_session(srv: ServerProcess) -> None:
    def hostile(name: str) -> tuple[dict[str, Any], httpx.Response]:
        """Its cell's answer, and the answer to a plain cell after it in the same session."""
        caller, create, code = HOSTILE[name]
        with Session(srv, caller, **create) as s:
            return s.run(code, cell_timeout=3), s.http.post(
                f"/v1/sessions/{s.id}/run", json={"code": "1 + 1", "cell_timeout": 30})

    with Session(srv, OTHER) as benign, ThreadPoolExecutor(len(HOSTILE)) as threads:
        benign.run("total = 0")
        futures = {name: threads.submit(hostile, name) for name in HOSTILE}
        for i in range(1, 11):  # answered right, cell after cell, while they run
            assert benign.value(f"total += {i}\ntotal") == str(i * (i + 1) // 2)
        got = {name: f.result()[0] for name, f in futures.items()}
        after = {name: f.result()[1] for name, f in futures.items()}
        assert benign.value("total") == "55"
    for name in ("memory", "flood"):  # each session lives on after its limit
        assert after[name].json()["cells"][0]["display"] == [{"text/plain": "2"}], name
    if got["fork"]["session"]["state"] == "open":  # its copies ended with the cell
        assert after["fork"].json()["cells"][0]["display"] == [{"text/plain": "2"}]
    else:  # the container's own limits took it down: that session only
        assert after["fork"].status_code == 410, after["fork"].text
    memory = got["memory"]["cells"][0]
    assert memory["error"][0]["ename"] == "MemoryError", got["memory"]
    assert got["memory"]["session"]["state"] == "open"  # an exception of its own, not a crash
    flood = got["flood"]
    assert flood["cells"][0]["status"] == "Error" and "output limit of 65536" in flood["message"]
    # its output limit stopped it; the answer's limit (here no larger than the output limit)
    # keeps its traceback whole and cuts its stdout to what is left, saying so
    stdout = flood["cells"][0]["stdout"]
    assert set(stdout) == {"x"} and 65536 - 2048 < len(stdout) <= 65536, len(stdout)
    assert (f"cells[0].stdout: cut to its first bytes at the response limit of {ANSWER_LIMIT}"
            in flood["message"]), flood["message"]
    assert got["fork"]["status"] == "Failed", got["fork"]
    eventually(lambda: session_containers(srv) == [], what="every session's container removed")


@pytest.mark.isolation
def test_no_network_outside_or_to_the_host(srv: ServerProcess) -> None:
    with Session(srv) as s:
        got = s.run(probes.network_probe(srv.url.rsplit(":", 1)[1]))
        assert got["status"] == "Success", got
        assert got["cells"][0]["stdout"] == probes.NETWORK_EXPECTED + "\n"
    assert_clean(srv)


@pytest.mark.isolation
def test_no_writes_outside_the_work_dir_no_host_files(srv: ServerProcess) -> None:
    """A session's container has the harness as PID 1, as a snippet's has: the cell, run by
    the session's kernel under the candidate's uid, is held to what a code item is."""
    with Session(srv) as s:
        got = s.run(probes.FILESYSTEM_PROBE)
        assert got["status"] == "Success", got
        assert got["cells"][0]["stdout"] == probes.filesystem_expected(srv.runtime) + "\n"
    assert_clean(srv)


@pytest.mark.isolation
def test_a_child_outliving_its_cell_goes_with_its_session(srv: ServerProcess) -> None:
    """A cell's background process is its session's own, as a notebook's is: it lives past
    its cell, in the session's container only, where another caller's session never meets
    it. Closing the session removes that container and the process with it: none is left in
    any container of the server, and the pool is as it was."""
    with Session(srv) as s, Session(srv, OTHER) as other:
        got = s.run(probes.CHILD_OUTLIVES)
        assert got["cells"][0]["stdout"] == probes.CHILD_OUTLIVES_EXPECTED + "\n", got
        mine = s.run(probes.THEIR_PROCESSES)["cells"][0]["stdout"]
        assert all(command in mine for command in probes.CHILD_COMMANDS), mine
        theirs = other.run(probes.THEIR_PROCESSES)["cells"][0]["stdout"]
        assert theirs.split(" ", 1)[1] == "[]\n", theirs
        assert len(session_containers(srv)) == 2
    eventually(lambda: session_containers(srv) == [], what="the sessions' containers removed")
    assert_clean(srv)  # every container left runs its harness and fork server only


# A cell that leaves the CPU busy after it ends: a process of its own session and a thread
# of the interpreter, each in an endless loop.
BURN = ("import subprocess, sys, threading\n"
        "subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\n"
        "def spin():\n    while True: pass\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "print('burning')")
# The CPU seconds every process of the session's uid has used (threads included), as /proc
# counts them
SESSION_CPU = """
import os
ticks = 0
for p in os.listdir('/proc'):
    if p.isdigit() and os.stat(f'/proc/{p}').st_uid == os.getuid():
        fields = open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
print(ticks / os.sysconf('SC_CLK_TCK'))
"""


def container_cpu_s(srv: ServerProcess, container_id: str) -> float:
    """The CPU seconds a container's cgroup has used, as the engine reports them."""
    import docker

    client = docker.DockerClient(base_url=srv.docker_host) if srv.docker_host else \
        docker.from_env()
    try:
        stats = client.api.stats(container_id, stream=False, one_shot=True)
        return stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9
    finally:
        client.close()


@pytest.mark.isolation
def test_nothing_of_a_session_runs_between_its_cells(srv: ServerProcess) -> None:
    """A session runs only while one of its cells does (holding a slot of the fair gate):
    between cells its interpreter, a process a cell left running and a thread it started are
    all stopped, so a session cannot load the machine outside the gate, where another
    caller's timed test would lose to it. They go on at the next cell: the session's state
    is as it was. The idle window lasts until the container has used a CPU second, or 12 s
    when (as it must) it does not."""
    before = set(session_containers(srv))
    with Session(srv) as s:
        (container,) = set(session_containers(srv)) - before
        assert s.run(BURN)["cells"][0]["stdout"] == "burning\n"
        assert float(s.run(SESSION_CPU)["cells"][0]["stdout"]) > 0  # the loops ran in it
        # the container's CPU as the host counts it (gVisor's own count of a throttled
        # program's time runs on): the old code used 1 s of it within the window
        used, idle_end = container_cpu_s(srv, container), time.monotonic() + 12
        while time.monotonic() < idle_end and container_cpu_s(srv, container) - used < 1.0:
            time.sleep(0.5)
        idle = container_cpu_s(srv, container) - used
        assert idle < 0.5, f"the session's container used {idle:.2f} CPU s between cells"
        mine = s.run(probes.THEIR_PROCESSES)["cells"][0]["stdout"]
        assert "while True: pass" in mine, mine  # stopped, not killed
        assert s.value("threading.active_count()") == "2"
    assert_clean(srv)


@pytest.mark.isolation
def test_kill_everything(srv: ServerProcess) -> None:
    """kill(-1) in a cell spares the kernel (the caller) and reaches nothing of root's (the
    harness, the fork server): the session keeps its state. From a child of the cell it
    kills the kernel too, and that session only is lost, with a 410 after; another
    caller's session answers throughout."""
    with Session(srv, OTHER) as benign, Session(srv) as s:
        benign.run("x = 'benign'")
        s.run("y = 2")
        got = s.run(probes.KILL_EVERYTHING)
        cell = got["cells"][0]
        if probes.kill_everything_raises(srv.runtime):
            assert cell["error"][0]["ename"] == "ProcessLookupError", got
        else:
            assert got["status"] == "Success", got
            assert cell["stdout"] == probes.KILL_EVERYTHING_EXPECTED + "\n"
        assert got["session"]["state"] == "open" and s.value("y") == "2"
        got = s.run("import subprocess\n"
                    f"subprocess.run(['python3', '-c', {probes.KILL_EVERYTHING!r}])")
        assert got["cells"][0]["status"] == "Error" and got["session"]["state"] == "lost", got
        assert "exited (exit code -9)" in got["message"], got
        r = s.http.post(f"/v1/sessions/{s.id}/run", json={"code": "y"})
        assert r.status_code == 410 and "lost" in r.json()["detail"], r.text
        assert benign.value("x") == "'benign'"
    assert httpx.get(srv.url + "/healthz", timeout=10).status_code == 200
    eventually(lambda: session_containers(srv) == [], what="the sessions' containers removed")
    assert_clean(srv)


# What a session could leave for a later program (a file in its work dir and in /dev/shm, the
# one world-writable place outside it; an environment variable; a global; a process), and a
# probe for each, one line apiece
LEAVE = ("import os, subprocess\nopen('left.txt', 'w').write('x')\n"
         "open('/dev/shm/left', 'w').write('x')\nos.environ['LEFT'] = '1'\nleft = 1\n"
         "subprocess.Popen(['sleep', '100'], start_new_session=True)")
LOOK = """
import os
print('files', sorted(os.listdir('.')))
print('work dirs', len(os.listdir('/work')))
print('shm', sorted(os.listdir('/dev/shm')))
print('env', os.environ.get('LEFT'))
print('global', 'left' in globals())
print('processes', len([p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()
                        and os.stat(f'/proc/{p}').st_uid == os.getuid()]))
"""
NOTHING_LEFT = ("files []\nwork dirs 1\nshm []\nenv None\nglobal False\nprocesses 0\n")


@pytest.mark.isolation
def test_nothing_a_session_leaves_reaches_another_caller(srv: ServerProcess) -> None:
    """Another caller's session, open beside it or after it closed, and a snippet on
    ``/run_code`` meet none of it: a session's container is its own, never given back."""
    with Session(srv) as mine:
        mine.run(LEAVE)
        seen = mine.run(LOOK)["cells"][0]["stdout"]
        assert seen == ("files ['left.txt']\nwork dirs 1\nshm ['left']\nenv 1\nglobal True\n"
                        "processes 1\n"), seen  # the probe sees what it looks for
        with Session(srv, OTHER) as beside:
            got = beside.run(LOOK)
            assert got["cells"][0]["stdout"] == NOTHING_LEFT, got
        with client(srv, THIRD) as c:
            r = c.post("/run_code", json={"language": "python", "code": LOOK})
            assert r.status_code == 200, r.text
            assert r.json()["run_result"]["stdout"] == NOTHING_LEFT.replace(
                "files []", "files ['main.py']"), r.json()
    with Session(srv, THIRD) as after:
        got = after.run(LOOK)
        assert got["cells"][0]["stdout"] == NOTHING_LEFT, got
    eventually(lambda: session_containers(srv) == [], what="the sessions' containers removed")
    assert_clean(srv)


def test_metrics(srv: ServerProcess) -> None:
    with Session(srv) as s:
        s.run("1")
        text = httpx.get(srv.url + "/metrics", timeout=10).text
        assert "reward_sessions_open 1.0" in text
    text = httpx.get(srv.url + "/metrics", timeout=10).text
    assert 'reward_session_cells_total{status="Finished"}' in text
    assert "reward_session_cell_seconds_count" in text
    assert 'reward_requests_total{code="201",route="/v1/sessions"}' in text


def test_no_container_left_when_the_server_stops_or_is_killed(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Stopped: its sessions' containers go with the pool's. Killed (SIGKILL): the engine
    closes each harness's stdin with the attach stream, the harness exits, the engine removes
    the container (sandbox/pool.py), a session's as a pooled one's."""
    path = tmp_path_factory.mktemp("sessions-shutdown")
    with run_server(path, env=SETTINGS, startup_s=180) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        Session(server).run("x = 1")
        pid = server.proc.pid
        assert len(session_containers(server)) == 1
    assert sandbox_containers(pid) == []
    with run_server(path, env=SETTINGS, startup_s=180) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        Session(server).run("x = 1")
        assert len(session_containers(server)) == 1
        killed = server.proc.pid
        os.killpg(killed, signal.SIGKILL)
        server.proc.wait()
        eventually(lambda: sandbox_containers(killed) == [], 60, "its containers removed")


def test_a_session_container_ends_itself_when_its_server_hangs(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A server stopped (SIGSTOP), not dead: its attach streams stay open and its owner runs,
    so neither the engine nor a reaper would act; the session's harness exits after its TTL
    plus IDLE_EXIT_SLACK_S without a job, and the engine removes its container."""
    from reward_server.run_code.sessions import IDLE_EXIT_SLACK_S

    with run_server(tmp_path_factory.mktemp("sessions-hung"), env=SETTINGS,
                    startup_s=180) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        Session(server, idle_ttl_s=1).run("x = 1")
        (mine,) = session_containers(server)
        os.killpg(server.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            eventually(lambda: mine not in {c["id"] for c in sandbox_containers(
                server.proc.pid)}, IDLE_EXIT_SLACK_S + 60, "the container ended itself")
            assert time.monotonic() - started > IDLE_EXIT_SLACK_S - 10  # not sooner
            assert server.proc.poll() is None  # the server was there all along, stopped
        finally:
            os.killpg(server.proc.pid, signal.SIGCONT)


def test_a_request_of_many_loud_cells_stops_at_the_answer_limit(srv: ServerProcess) -> None:
    """Cells each at the output limits made an answer of hundreds of MB (64 cells: 755 MB,
    the server grown by 2 GB, every caller's loop held 4 s; fresh-context audit). Past the
    answer limit the cells still to run do not; what ran is answered, the session goes on."""
    loud = "import sys\nprint('x' * 30000)\nprint('y' * 30000, file=sys.stderr)\n"
    with Session(srv) as s:
        r = s.http.post(f"/v1/sessions/{s.id}/run", json={
            "cells": [loud + f"n = {k}" for k in range(64)]})
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["status"] == "Failed" and len(got["cells"]) == 2, (
            got["status"], len(got["cells"]), got["message"])
        assert "cells[2:] not run" in got["message"]
        assert "sandbox_snippet_response_limit_bytes" in got["message"]
        assert s.value("n") == "1"  # as the last cell that ran left it
