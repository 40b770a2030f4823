"""A dataset's checker (``checker``: testlib-style ``checker <input> <output> <answer>``, exit
0 accepts) through the real server and Docker engine, on a real-shaped row with several
correct outputs: Codeforces 1352A "Sum of Round Numbers" (in CodeContests as
``1352_A. Sum of Round Numbers``), whose public test's answer lists the round numbers in
one order of many. A checker that fails to compile, crashes or hangs: bad_tests (null)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import ServerProcess
from tests.helpers.checker import CHECKER, PY_CHECKER, RIGHT, TESTS, WRONG
from tests.helpers.code import code_server, verify

# A Go checker (its build cache is dropped before the checker is kept) that accepts when the
# output has as many numbers as the answer
GO_ACCEPT = """package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	out, _ := os.ReadFile(os.Args[2])
	ans, _ := os.ReadFile(os.Args[3])
	if len(strings.Fields(string(out))) != len(strings.Fields(string(ans))) {
		fmt.Fprintln(os.Stderr, "count differs")
		os.Exit(1)
	}
}
"""


@pytest.fixture(scope="module")
def srv(docker_ready: None,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_SANDBOX_POOL_SIZE": "2", "REWARD_SERVER_CACHE_SIZE": "0"}
    with code_server(tmp_path_factory.mktemp("checker"), env=env) as server:
        yield server


def test_a_checker_accepts_another_correct_output(srv: ServerProcess) -> None:
    checker = {"language": "cpp", "source": CHECKER}
    compared, judged, wrong, in_python, in_go = verify(
        srv,
        {"response": RIGHT, "tests": TESTS},  # line by line: the order differs from the answer
        {"response": RIGHT, "tests": TESTS, "checker": checker},
        {"response": WRONG, "tests": TESTS, "checker": checker},
        {"response": RIGHT, "tests": TESTS, "checker": {"language": "py", "source": PY_CHECKER}},
        {"response": RIGHT, "tests": TESTS, "checker": {"language": "go", "source": GO_ACCEPT}},
    )
    assert [t["status"] for t in compared["tests"]] == ["wrong_answer", "wrong_answer"]
    assert (judged["status"], judged["score"]) == ("ok", 1.0), judged
    assert "checker: ok 5 cases" in judged["tests"][0]["stderr"]
    assert (wrong["status"], wrong["score"]) == ("ok", 0.0), wrong
    assert [t["status"] for t in wrong["tests"]] == ["wrong_answer", "wrong_answer"]
    assert "case 1: 1 terms, 2 suffice" in wrong["tests"][0]["stderr"]
    assert (in_python["status"], in_python["score"]) == ("ok", 1.0), in_python
    assert (in_go["status"], in_go["score"]) == ("ok", 1.0), in_go


def test_a_broken_checker_makes_the_item_unscorable(srv: ServerProcess) -> None:
    results = verify(
        srv,
        {"response": RIGHT, "tests": TESTS,
         "checker": {"language": "cpp", "source": "int main( {"}},
        {"response": RIGHT, "tests": TESTS,
         "checker": {"language": "c", "source": "#include <stdlib.h>\nint main(void) "
                                                 "{ abort(); }"}},
        {"response": RIGHT, "tests": TESTS,
         "checker": {"language": "c", "source": "int main(void) { return 3; }"}},
        {"response": RIGHT, "tests": TESTS,
         "checker": {"language": "python", "source": "while True:\n    pass"}},
        {"response": WRONG, "tests": TESTS,
         "checker": {"language": "python", "source": "import os\nos.kill(os.getpid(), 9)"}},
    )
    fragments = ["does not compile", "failed", "exit code 3", "ran past", "failed"]
    for result, fragment in zip(results, fragments, strict=True):
        assert (result["status"], result["score"]) == ("bad_tests", None), result
        assert fragment in result["detail"], result["detail"]


def test_a_checker_is_compiled_once_per_container(srv: ServerProcess) -> None:
    """A checker that reports its own directory's name (made once per compilation) and
    writes a file in its HOME: items after the first in a container find the directory it
    was compiled in; HOME is a scratch directory of its own (its program's is sealed)."""
    reporting = ("import os, sys\nopen(os.path.join(os.environ['HOME'], 'note'), 'w').write('x')\n"
                 "print('dir', os.path.basename(os.getcwd()), file=sys.stderr)")
    seen = []
    for i in range(5):  # one at a time, over the pool's 3 containers: one gets two
        (result,) = verify(srv, {"response": RIGHT + f"# {i}\n", "tests": TESTS[:1],
                                 "checker": {"language": "python", "source": reporting}})
        assert result["score"] == 1.0, result
        seen.append(result["tests"][0]["stderr"].rsplit("dir ", 1)[1].split()[0])
    assert len(set(seen)) < len(seen), seen


def test_bad_checker_items(srv: ServerProcess) -> None:
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for checker, fragment in [({"language": "cobol", "source": "x"}, "unknown language"),
                                  ({"language": "cpp"}, "checker.source")]:
            r = c.post("/v1/verify/code?on_invalid=error", json={"items": [
                {"response": RIGHT, "tests": TESTS, "checker": checker}]})
            assert r.status_code == 422 and fragment in r.text, r.text
        r = c.post("/v1/verify/code?on_invalid=error", json={"items": [
            {"response": "def f(x): return x", "fn_name": "f",
             "tests": [{"input": "[1]", "output": "1"}], "checker": {"source": CHECKER}}]})
        assert r.status_code == 422 and "'checker' goes with" in r.text, r.text


# A sloppy checker (not testlib): it aborts on output it cannot parse, and accepts the answer.
SLOPPY = """import os, sys
out, ans = (open(p).read().split() for p in sys.argv[2:4])
try:
    mine = [int(x) for x in out]
except ValueError:
    os.abort()
sys.exit(0 if mine == [int(x) for x in ans] else 1)
"""


def test_a_checker_crashed_by_the_output_is_a_wrong_answer(srv: ServerProcess) -> None:
    """A candidate must not buy a null by crashing the checker: the checker that fails on its
    output but accepts the reference answer was made to fail by the output (score 0); one
    that fails on the reference too is broken (bad_tests, null)."""
    tests = [{"input": "2 3\n", "output": "5\n"}]
    checker = {"language": "python", "source": SLOPPY}
    crashing, right, broken = verify(
        srv,
        {"response": "print('five')", "tests": tests, "checker": checker},
        {"response": "print(sum(map(int, input().split())))", "tests": tests,
         "checker": checker},
        {"response": "print('five')", "tests": [{"input": "2 3\n", "output": "five\n"}],
         "checker": checker},
    )
    assert (crashing["status"], crashing["score"]) == ("ok", 0.0), crashing
    assert crashing["tests"][0]["status"] == "wrong_answer"
    assert "not on the reference" in crashing["tests"][0]["stderr"], crashing
    assert (right["status"], right["score"]) == ("ok", 1.0), right
    assert (broken["status"], broken["score"]) == ("bad_tests", None), broken
    assert "the checker failed" in broken["detail"], broken  # on the reference as well
