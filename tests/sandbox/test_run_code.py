"""``POST /run_code`` through the real server and Docker engine, under runc and gVisor, called
by veRL's own SandboxFusion client (``verl.utils.reward_score.sandbox_fusion``) with only its
URL pointed here; and hostile snippets, each stopped by its own limit while a benign call
beside them is answered correctly, the pool clean after."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from verl.utils.reward_score.sandbox_fusion import compute_score
from verl.utils.reward_score.sandbox_fusion.utils import call_sandbox_api, check_correctness

from tests.conftest import SandboxRuntime, ServerProcess, run_server, wait_for_sandbox
from tests.sandbox.test_hostile_code import POOL, assert_clean

pytestmark = pytest.mark.usefixtures("docker_ready")

SUM = "a, b = map(int, input().split())\nprint(a + b)"
STDIN_CASES = {"inputs": ["1 2\n", "10 -4\n", "4000000000 5000000000\n"],
               "outputs": ["3\n", "6\n", "9000000000\n"]}
# veRL's fn_name rows: one JSON argument per stdin line, the printed return compared
CALL_CASES = {"fn_name": "add", "inputs": ["1\n2", "[1, 2]\n[3]"], "outputs": ["3", "[1, 2, 3]"]}
CPP_SUM = ('#include <cstdio>\nint main() { long long a, b; scanf("%lld %lld", &a, &b);\n'
           '  printf("%lld\\n", a + b); }')


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory,
        sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
    env = {**sandbox_runtime.env, "REWARD_SERVER_SANDBOX_POOL_SIZE": str(POOL)}
    with run_server(tmp_path_factory.mktemp(f"run-code-{sandbox_runtime.name}"),
                    env=env) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        yield server


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


HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    # name: (request, what its message must say); each with limits of its own
    "loop": ({"code": "while True:\n    pass", "run_timeout": 2}, "time limit of 2 s"),
    "fork": ({"code": "import os\nwhile True:\n    os.fork()", "run_timeout": 3}, ""),
    "memory": ({"code": "xs = []\nwhile True:\n    xs.append(bytearray(10 * 1024**2))",
                "memory_limit_MB": 128}, "memory limit of 128 MB"),
    "flood": ({"code": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"},
              "output limit of"),
}


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


def test_metrics_count_run_code(srv: ServerProcess) -> None:
    post(srv, language="python", code="print(1)")
    text = httpx.get(srv.url + "/metrics", timeout=10).text
    assert 'reward_items_total{status="Success",verifier="run_code"}' in text
    assert 'reward_requests_total{code="200",route="/run_code"}' in text
