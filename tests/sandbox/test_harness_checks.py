"""The harness's judging on the host (no container): ints past Python's int-string limit on
the proxy's wire, integer tokens under a tolerance, the solution's exceptions as the test code
sees them, and a dataset's checker that cannot run once
the candidate's program ran. For the checker the harness is made to run everything under this
process's uid (``slate.isolated`` False, as outside the container), so nothing here signals or
cleans up another uid's processes or files on the host."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sandbox.harness import candidate, compare, protocol, slate, statuses, stdio
from sandbox.languages import resolve

BIG = "9" * 6021  # as many digits as 2 ** 20000: past int()'s 4,300-digit limit


@pytest.mark.parametrize("value", [2**20000, -(2**20000), [1, 2**64, -(2**64) - 1]],
                         ids=["2**20000", "-2**20000", "around-64-bits"])
def test_ints_past_the_int_string_limit_cross_the_wire(value: object) -> None:
    """A return value (or argument) of 6,021 digits: decimal would be refused past 4,300."""
    wire = json.loads(json.dumps(protocol.encode(value)))
    assert protocol.decode(wire) == value


def test_a_ten_million_digit_int_crosses_in_linear_time() -> None:
    value = 1 << 33_219_281  # 10,000,000 decimal digits
    # CPU time, not the wall clock: the machine's load must not decide the test
    started = time.process_time()
    wire = json.dumps(protocol.encode(value))
    assert protocol.decode(json.loads(wire)) == value
    assert time.process_time() - started < 1.0  # decimal: minutes, in the trusted process
    started = time.process_time()
    with pytest.raises(ValueError):  # a decimal of as many digits, forged: refused at once
        protocol.decode({"i": "9" * 10_000_000})
    assert time.process_time() - started < 0.5


@pytest.mark.parametrize(("expected", "actual", "tolerance", "match"), [
    ("1000000", "1000001", 1e-6, False),  # two integers: exact at any tolerance
    ("1000000", "1000000.5", 1e-6, True),  # a decimal: within the tolerance
    ("1000000.0", "1000001", 1e-6, True),
    ("3 1000000", "3 1000000", 1e-6, True),
    ("007 -0 +5", "7 0 5", 1e-6, True),  # integers by value
    ("5", "-5", 1e-6, False),
    (BIG, BIG[:-1] + "7", 1e-6, False),  # equal as floats (inf), and as rounded decimals
    (BIG, "+" + BIG, 1e-6, True),
    ("1 2", "1 3", 0.5, False),
    ("0.5 2", "0.7 2", 0.5, True),
])
def test_integer_tokens_compare_exactly(expected: str, actual: str, tolerance: float,
                                        match: bool) -> None:
    assert compare.outputs_match(expected, actual, tolerance) is match


@pytest.mark.parametrize("error", ["StopIteration: ", "StopIteration", "StopAsyncIteration: x"])
def test_a_solution_ending_an_iteration_is_relayed_as_runtime_error(error: str) -> None:
    """Relayed as it is, a StopIteration the solution raised inside a test's ``map()`` ends
    the map: ``all(map(...))`` is True, and a wrong solution passed."""
    exc = candidate.raised(error)
    assert type(exc) is RuntimeError and error.split(":")[0] in str(exc)

    def call(x: int) -> bool:
        raise exc

    with pytest.raises(RuntimeError):
        all(map(call, [1, 2]))


@pytest.mark.parametrize(("error", "kind"), [("ValueError: bad", ValueError),
                                             ("KeyError: 1", KeyError),
                                             ("Forged: x", RuntimeError)])
def test_a_solutions_builtin_exception_keeps_its_type(error: str, kind: type) -> None:
    assert type(candidate.raised(error)) is kind


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One uid for all, and a work root of the test's own: the harness as run by hand."""
    monkeypatch.setattr(slate, "isolated", lambda: False)
    monkeypatch.setattr(slate, "drop_privileges", lambda who=None: None)
    monkeypatch.setattr(slate, "WORK_ROOT", str(tmp_path))
    return tmp_path


def stdio_job(workdir: Path, checker_run: list[str]) -> dict:
    python = resolve("python")
    assert python is not None
    (workdir / python.source).write_text("print(1)\n")
    return {"mode": "stdio", "language": python.as_job(256), "source": "print(1)\n",
            "time_limit_s": 5.0, "memory_mb": 256, "output_limit_bytes": 1 << 20,
            "stderr_tail_bytes": 2048, "compile_time_limit_s": 30.0, "compile_memory_mb": 768,
            "syntax_error_markers": [], "budget_s": 60.0, "stop_on_failure": False,
            "deadline": time.monotonic() + 60,
            "tests": [{"input": "", "output": "1\n", "tolerance": None}] * 2,
            "checker": {"language": {**python.as_job(768), "run": checker_run},
                        "source": "import sys\nsys.exit(0)\n"}}


def test_a_checker_that_cannot_start_after_the_program_ran_fails_the_test(
        outside: Path) -> None:
    """After the program ran, a checker that cannot start (here its command does not exist;
    in a container, a pids limit the program filled) is the program's failure, 0 and never
    cached, not the dataset's null (bad_tests)."""
    workdir = outside / "work"
    workdir.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir)}
    result = stdio.run_stdio(stdio_job(workdir, ["/nonexistent/checker"]), str(workdir), env)
    assert result["status"] == statuses.OK, result
    assert [t["status"] for t in result["tests"]] == [statuses.CHECKER_BLOCKED] * 2, result
    assert "could not start" in result["tests"][0]["stderr"], result
    assert statuses.CHECKER_BLOCKED in statuses.UNCACHEABLE_TEST
    assert statuses.CHECKER_BLOCKED in statuses.REPLACES_CONTAINER


def test_a_checker_that_runs_judges_the_output(outside: Path) -> None:
    """The same job with a checker that starts: it judges, and the tests pass."""
    workdir = outside / "work"
    workdir.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir)}
    job = stdio_job(workdir, ["python3", "-I", "main.py"])
    result = stdio.run_stdio(job, str(workdir), env)
    assert [t["status"] for t in result["tests"]] == [statuses.PASSED] * 2, result
