"""``POST /run_code`` through the real server and Docker engine, under runc and gVisor, called
by veRL's own SandboxFusion client (``verl.utils.reward_score.sandbox_fusion``) with only its
URL pointed here (behind a token: the URL's password); Python forked from the warm zygote as
``python3`` runs it, each call seeing nothing an earlier one left; hostile snippets, each
stopped by its own limit while a benign call beside them is answered correctly, the pool
clean after; and the code verifier's isolation probes (tests/helpers/probes.py: no network,
no write outside the work dir, no host file, no child outliving the snippet, kill(-1)) held
to the same expectations on both of a Python snippet's paths."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from verl.utils.reward_score.sandbox_fusion import compute_score
from verl.utils.reward_score.sandbox_fusion.utils import call_sandbox_api, check_correctness

from reward_server.verifiers.code import SPARE_CONTAINERS
from tests.conftest import ServerProcess, run_server
from tests.helpers import probes
from tests.helpers.code import sandbox_server
from tests.helpers.sandbox_pool import POOL, assert_clean

# what the server does around the sandbox: under gVisor too only where marked isolation
pytestmark = [pytest.mark.usefixtures("docker_ready"), pytest.mark.host_side]

SUM = "a, b = map(int, input().split())\nprint(a + b)"
STDIN_CASES = {"inputs": ["1 2\n", "10 -4\n", "4000000000 5000000000\n"],
               "outputs": ["3\n", "6\n", "9000000000\n"]}
# veRL's fn_name rows: one JSON argument per stdin line, the printed return compared
CALL_CASES = {"fn_name": "add", "inputs": ["1\n2", "[1, 2]\n[3]"], "outputs": ["3", "[1, 2, 3]"]}
TOKEN = "verl-secret"
STARTUP_S = 180  # the server's imports alone took 46 s at a load average of 40 on 2 cores
CPP_SUM = ('#include <cstdio>\nint main() { long long a, b; scanf("%lld %lld", &a, &b);\n'
           '  printf("%lld\\n", a + b); }')


srv = sandbox_server("run-code", {"REWARD_SERVER_SANDBOX_POOL_SIZE": str(POOL)}, STARTUP_S)


def fenced(code: str) -> str:
    return f"Here it is:\n```python\n{code}\n```"


def post(srv: ServerProcess, **body: Any) -> dict[str, Any]:
    with srv.client() as c:
        r = c.post("/run_code", json=body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize(("code", "score"), [(SUM, 1.0), ("print(3)", 1 / 3),
                                             ("print(int(input().split()[0]))", 0.0)])
def test_verl_compute_score_stdin_rows(srv: ServerProcess, code: str, score: float) -> None:
    got, metadata = compute_score(srv.url + "/run_code", threading.Semaphore(8), 256,
                                  fenced(code), json.dumps(STDIN_CASES))
    assert got == pytest.approx(score), metadata
    assert all(m["api_request_error"] is None for m in metadata)


@pytest.mark.parametrize(("code", "score"), [
    ("def add(a, b):\n    return a + b", 1.0),
    ("class Solution:\n    def add(self, a, b):\n        return a + b", 1.0),
    ("def add(a, b):\n    return a", 0.0),
    ("def add(a, b):\n    raise ValueError('no')", 0.0),
])
def test_verl_compute_score_fn_name_rows(srv: ServerProcess, code: str, score: float) -> None:
    got, metadata = compute_score(srv.url + "/run_code", None, 256, fenced(code),
                                  CALL_CASES)
    assert got == score, metadata


def test_verl_call_sandbox_api_and_compile_errors(srv: ServerProcess) -> None:
    """veRL's lower-level call, in C++: the build and the run, then a compile error, which
    its check_correctness reads as -4 for every case."""
    response, error = call_sandbox_api(srv.url + "/run_code", CPP_SUM, "4000000000 1\n", 10, 5,
                                       256, language="cpp")
    assert error is None
    assert response["status"] == "Success", response
    assert response["compile_result"]["status"] == "Finished"
    assert response["compile_result"]["return_code"] == 0
    assert response["run_result"]["stdout"] == "4000000001\n"
    results, metadata = check_correctness(srv.url + "/run_code", STDIN_CASES,
                                          "int main() { return x; }", timeout=10,
                                          language="cpp")
    assert results == [-4, -4, -4], metadata
    assert "was not declared" in metadata[0]["compile_stderr"]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server started with a token (runc, one container)."""
    env = {"REWARD_SERVER_API_TOKEN": TOKEN, "REWARD_SERVER_SANDBOX_POOL_SIZE": "1"}
    with run_server(tmp_path_factory.mktemp("run-code-token"), env=env,
                    startup_s=STARTUP_S) as server:
        yield server


def test_verl_behind_the_token_as_the_urls_password(guarded: ServerProcess) -> None:
    """veRL's client sends no header of its own; ``requests`` sends the URL's password as
    HTTP Basic, which the server takes as the token. A wrong one is a 401, which veRL reports
    as an API error (-1 for each case), never a score."""
    address = guarded.url.removeprefix("http://")
    url = f"http://verl:{TOKEN}@{address}/run_code"
    deadline = time.monotonic() + STARTUP_S
    while True:  # the pool fills in the background after start
        response, error = call_sandbox_api(url, "print(input())", "ready", 10, 5, 256)
        if response is not None and response["status"] == "Success":
            break
        assert time.monotonic() < deadline, (response, error)
        time.sleep(0.5)
    got, metadata = compute_score(url, None, 256, fenced(SUM), json.dumps(STDIN_CASES))
    assert got == 1.0, metadata
    response, error = call_sandbox_api(f"http://verl:wrong@{address}/run_code", SUM, "1 2",
                                       10, 5, 256)
    assert response is None and "401" in error, error
    results, _ = check_correctness(f"http://{address}/run_code", STDIN_CASES, SUM)
    assert results == [-1, -1, -1]  # no password at all: the API's error, not a zero


def test_files_in_and_out_and_limits_capped(srv: ServerProcess) -> None:
    data = base64.b64encode(b"\x00\xffdata").decode()
    got = post(srv, language="bash", code="cat dir/in.bin > out.bin; echo done; echo err >&2",
               files={"dir/in.bin": data, "skipped.txt": None},
               fetch_files=["out.bin", "absent.txt"], run_timeout=1000,
               memory_limit_MB=100000)
    assert got["status"] == "Success", got
    assert got["run_result"]["stdout"] == "done\n"
    assert got["run_result"]["stderr"] == "err\n"
    assert got["files"] == {"out.bin": data}
    assert "absent.txt" in got["message"]
    assert got["limits"]["run_timeout"] == 30.0  # the server's max_time_limit_s
    assert got["limits"]["memory_limit_MB"] == 768  # its max_memory_mb


@pytest.mark.parametrize(("language", "code", "stdout"), [
    ("nodejs", "console.log(1 + 2)", "3\n"),
    ("go", 'package main\nimport "fmt"\nfunc main() { fmt.Println(3) }', "3\n"),
    ("java", "public class Main { public static void main(String[] a) {\n"
             "  System.out.println(3); } }", "3\n"),
    ("rust", 'fn main() { println!("{}", 1 + 2); }', "3\n"),
])
@pytest.mark.isolation
def test_sandbox_fusion_languages(srv: ServerProcess, language: str, code: str,
                                  stdout: str) -> None:
    got = post(srv, language=language, code=code, compile_timeout=30)
    assert got["status"] == "Success", got
    assert got["run_result"]["stdout"] == stdout


def test_snippets_run_as_sandbox_fusion_runs_them(srv: ServerProcess) -> None:
    """Python with its script's directory on the path (an uploaded module imports), and
    nodejs with no compile step: its syntax error is the run's exit code."""
    helper = base64.b64encode(b"X = 5\n").decode()
    got = post(srv, language="python", code="import helper\nprint(helper.X)",
               files={"helper.py": helper})
    assert got["run_result"]["stdout"] == "5\n", got
    got = post(srv, language="nodejs", code="function f( {")
    assert got["status"] == "Failed" and got["compile_result"] is None
    assert got["run_result"]["return_code"] == 1
    assert "SyntaxError" in got["run_result"]["stderr"]


# Python as `python3 -s main.py` runs it, though forked from the warm zygote: (code, the
# request's other fields, stdout, return code, what stderr must hold, what it must not)
AS_PYTHON3: dict[str, tuple[str, dict[str, Any], str, int | None, str, str]] = {
    "on the zygote": ("import os\nprint(os.getppid() != 1)", {}, "True\n", 0, "", "?"),
    "a thread prints after main": (
        "import threading, time\ndef late():\n    time.sleep(0.2)\n    print('late')\n"
        "threading.Thread(target=late).start()\nprint('main')", {}, "main\nlate\n", 0, "", "?"),
    "atexit": ("import atexit\natexit.register(print, 'bye')\nprint('hi')", {}, "hi\nbye\n",
               0, "", "?"),
    "a traceback from the program's frame": (
        "def f():\n    1 / 0\nf()", {}, "", 1,
        'Traceback (most recent call last):\n  File "/work/', "harness"),
    "a syntax error as python3 prints it": ("print(\n", {}, "", 1, "SyntaxError",
                                             "Traceback"),
    "sys.exit with a message": ("import sys\nsys.exit('boom')", {}, "", 1, "boom\n", "?"),
    "stdin": ("print(input()[::-1])", {"stdin": "abc\n"}, "cba\n", 0, "", "?"),
    "a module it writes imports, no bytecode left": (
        "import os\nopen('m.py', 'w').write('X = 7')\nimport m\n"
        "print(m.X, sorted(os.listdir()))", {}, "7 ['m.py', 'main.py']\n", 0, "", "?"),
    "unbuffered: printed before a timeout": ("print('before')\nwhile True:\n    pass",
                                             {"run_timeout": 1}, "before\n", None, "", "?"),
    "not on the zygote with files": ("import os\nprint(os.getppid() != 1)",
                                     {"files": {"a.txt": ""}}, "False\n", 0, "", "?"),
}


@pytest.mark.isolation
@pytest.mark.parametrize("name", AS_PYTHON3)
def test_python_snippets_fork_from_the_zygote_as_python3_runs_them(srv: ServerProcess,
                                                                   name: str) -> None:
    code, extra, stdout, return_code, has, lacks = AS_PYTHON3[name]
    got = post(srv, language="python", code=code, **extra)
    run = got["run_result"]
    assert (run["stdout"], run["return_code"]) == (stdout, return_code), got
    assert has in run["stderr"] and lacks not in run["stderr"], got


# Each call looks for what an earlier one left (files in its work dir and beside it, in
# /dev/shm, a process of the candidate's uid) and leaves its own; the odd ones leave a process
# too, which makes their container dirty (replaced), so the even ones reuse theirs.
LEFTOVERS = r"""
import os, sys, time
def listing(path):
    return sorted(os.listdir(path))
here = os.path.basename(os.getcwd())
theirs = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()
          and os.stat(f"/proc/{p}").st_uid == os.getuid()]
print(os.uname().nodename, os.getppid() != 1, [n for n in listing("/work") if n != here],
      sorted(set(listing(".")) - {"main.py"}), listing("/dev/shm"), theirs)
os.mkdir("locked")
open("locked/secret", "w").write("x")
os.chmod("locked", 0)
open("/dev/shm/left", "w").write("x")
if int(sys.stdin.read()) % 2 and os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(60)
"""


@pytest.mark.isolation
def test_a_snippet_sees_nothing_an_earlier_one_left(srv: ServerProcess) -> None:
    seen: set[str] = set()
    reused = 0
    for index in range(6):
        got = post(srv, language="python", code=LEFTOVERS, stdin=str(index))
        assert got["status"] == "Success", got
        host, forked, *found = got["run_result"]["stdout"].split(" ", 2)
        assert forked == "True", got  # the zygote's child, which the sweep must reach too
        assert found == ["[] [] [] []\n"], (index, got["run_result"]["stdout"])
        reused += host in seen
        seen.add(host)
    assert reused, "no container ran two snippets: nothing was proven"
    assert_clean(srv)


HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    # name: (request, what its message must say); each with limits of its own
    "loop": ({"code": "while True:\n    pass", "run_timeout": 2}, "time limit of 2 s"),
    "fork": ({"code": "import os\nwhile True:\n    os.fork()", "run_timeout": 3}, ""),
    "memory": ({"code": "xs = []\nwhile True:\n    xs.append(bytearray(10 * 1024**2))",
                "memory_limit_MB": 128}, "memory limit of 128 MB"),
    "flood": ({"code": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"},
              "output limit of"),
}


@pytest.mark.isolation
def test_hostile_snippets_contained_beside_a_benign_call(srv: ServerProcess) -> None:
    def call(body: dict[str, Any]) -> dict[str, Any]:
        with httpx.Client(base_url=srv.url, timeout=120) as c:
            r = c.post("/run_code", json={"language": "python", **body})
        assert r.status_code == 200, r.text
        return r.json()

    with ThreadPoolExecutor(len(HOSTILE) + 1) as pool:
        hostile = {name: pool.submit(call, body) for name, (body, _) in HOSTILE.items()}
        benign = pool.submit(call, {"code": SUM, "stdin": "20 22"})
        assert benign.result()["status"] == "Success"
        assert benign.result()["run_result"]["stdout"] == "42\n"
        for name, future in hostile.items():
            got = future.result()
            run = got["run_result"]
            assert got["status"] == "Failed", (name, got)
            assert HOSTILE[name][1] in got["message"], (name, got)
            if name == "loop":
                assert run["status"] == "TimeLimitExceeded" and run["return_code"] is None
            elif name == "fork":
                assert run["status"] == "TimeLimitExceeded" or run["return_code"] != 0, got
            else:
                assert run["status"] == "Finished" and run["return_code"] != 0, (name, got)
        assert len(hostile["flood"].result()["run_result"]["stdout"]) <= 8 * 1024 * 1024
    assert_clean(srv)


# A Python snippet runs by either of two paths, each held to the probes: forked from the warm
# zygote, or (when files come with it) as a fresh `python3 main.py` started by the harness.
PATHS = {"zygote": {}, "fresh": {"files": {"data.txt": ""}}}


def run_python(srv: ServerProcess, code: str, path: str, **body: Any) -> dict[str, Any]:
    """A Python snippet by ``path``, checked to have taken it (the zygote's child has the
    zygote, not the harness, as its parent)."""
    check = "import os as _os\nprint('zygote' if _os.getppid() != 1 else 'fresh', end=' ')\n"
    got = post(srv, language="python", code=check + code, **PATHS[path], **body)
    taken, _, stdout = (got["run_result"] or {}).get("stdout", "").partition(" ")
    assert taken == path, got
    got["run_result"]["stdout"] = stdout
    return got


@pytest.mark.isolation
@pytest.mark.parametrize("path", PATHS)
def test_no_network_outside_or_to_the_host(srv: ServerProcess, path: str) -> None:
    got = run_python(srv, probes.network_probe(srv.url.rsplit(":", 1)[1]), path)
    assert got["status"] == "Success", got
    assert got["run_result"]["stdout"] == probes.NETWORK_EXPECTED + "\n"
    assert_clean(srv)


@pytest.mark.isolation
@pytest.mark.parametrize("path", PATHS)
def test_no_writes_outside_the_work_dir_no_host_files(srv: ServerProcess, path: str) -> None:
    got = run_python(srv, probes.FILESYSTEM_PROBE, path)
    assert got["status"] == "Success", got
    assert got["run_result"]["stdout"] == probes.filesystem_expected(srv.runtime) + "\n"
    assert_clean(srv)


@pytest.mark.isolation
@pytest.mark.parametrize("path", PATHS)
def test_a_child_outliving_its_snippet_is_gone_before_the_next(srv: ServerProcess,
                                                               path: str) -> None:
    """The snippet's children live past its end; the harness kills them as it sweeps, and
    the container, dirty for what was left, is replaced: no later snippet, in that container
    or another, meets a process of the candidate's uid, and every container runs its
    harness and fork server only."""
    got = run_python(srv, probes.CHILD_OUTLIVES + "\nimport os\nprint(os.uname().nodename)", path)
    assert got["status"] == "Success", got
    printed, host = got["run_result"]["stdout"].splitlines()
    assert printed == probes.CHILD_OUTLIVES_EXPECTED
    for _ in range(POOL + SPARE_CONTAINERS + 1):  # more snippets than there are containers
        later = post(srv, language="python", code=probes.THEIR_PROCESSES)
        assert later["status"] == "Success", later
        assert later["run_result"]["stdout"].split(" ", 1)[1] == "[]\n", (host, later)
    assert_clean(srv)


@pytest.mark.isolation
@pytest.mark.parametrize("path", PATHS)
def test_kill_everything(srv: ServerProcess, path: str) -> None:
    """kill(-1) from a snippet reaches no process but its own uid's: the harness and the
    fork server (root) stay, the snippet ends as it would have (or, under gVisor, with the
    ESRCH of a kill that found nothing of its own to signal), and the next call is answered
    right from the same pool."""
    got = run_python(srv, probes.KILL_EVERYTHING, path)
    run = got["run_result"]
    if probes.kill_everything_raises(srv.runtime):
        assert (got["status"], run["return_code"], run["stdout"]) == ("Failed", 1, ""), got
        assert run["stderr"].endswith("ProcessLookupError: [Errno 3] No such process\n"), got
    else:
        assert got["status"] == "Success", got
        assert run["stdout"] == probes.KILL_EVERYTHING_EXPECTED + "\n"
    assert httpx.get(srv.url + "/healthz", timeout=10).status_code == 200
    after = run_python(srv, SUM, path, stdin="20 22")
    assert after["status"] == "Success" and after["run_result"]["stdout"] == "42\n", after
    assert_clean(srv)


def test_metrics_count_run_code(srv: ServerProcess) -> None:
    post(srv, language="python", code="print(1)")
    text = httpx.get(srv.url + "/metrics", timeout=10).text
    assert 'reward_items_total{status="Success",verifier="run_code"}' in text
    assert 'reward_requests_total{code="200",route="/run_code"}' in text
