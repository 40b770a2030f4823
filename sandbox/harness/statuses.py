"""Every status a code item or one of its tests can have, and the rules keyed on them, in one
place: the harness writes them, the runner checks and acts on them, the verifier reports and
scores them, the cache keeps or skips them. Standard library only (it runs in the image too).

Two levels, as in SandboxFusion: what the *program* did (a test status) and what became of
the *execution* (an execution status, then the item's status in the verifier).
"""

from __future__ import annotations

from typing import Final, Literal, get_args

# checker_blocked: the dataset's checker could not run on the test's output after the
# program ran (its files could not be written, it could not start): what the program left
# behind is the likely cause, so it scores 0 like any failure, but says nothing certain
# about the program and is never cached.
TestStatus = Literal["passed", "wrong_answer", "timeout", "runtime_error", "memory_limit",
                     "output_limit", "skipped", "checker_blocked"]
# What the harness answers for one execution. harness_error: it failed before any program of
# the candidate's ran (the runner retries on another container, then calls it unavailable).
ExecutionStatus = Literal["ok", "syntax_error", "compile_error", "bad_tests", "harness_error"]
# What the verifier reports for an item. no_code: the response has no program;
# sandbox_unavailable: no container could be had; not_run: the request's budget ran out before
# the item ran (every verifier with workers says so: reward_server.slow_lane; it was "timeout"
# before, a word that now only means a test that ran out of time). bad_tests: the dataset's
# tests (or setup, or checker) are broken.
CodeStatus = Literal["ok", "no_code", "syntax_error", "compile_error", "bad_tests",
                     "sandbox_unavailable", "not_run"]

TEST_STATUSES: frozenset[str] = frozenset(get_args(TestStatus))
EXECUTION_STATUSES: frozenset[str] = frozenset(get_args(ExecutionStatus))
CODE_STATUSES: frozenset[str] = frozenset(get_args(CodeStatus))

# A test that ended so may have left the container in a bad state: replace it before reuse.
REPLACES_CONTAINER: frozenset[str] = frozenset({"timeout", "memory_limit", "output_limit",
                                                "checker_blocked"})
# Items the completion could not cause: the reward is null, never 0.
UNSCORABLE: frozenset[str] = frozenset({"bad_tests", "sandbox_unavailable", "not_run"})
# Not cached: an outage or a spent budget says nothing about the program, and a timeout, a
# memory kill or a checker that could not run can depend on the machine or the moment.
UNCACHEABLE_ITEM: frozenset[str] = frozenset({"sandbox_unavailable", "not_run"})
UNCACHEABLE_TEST: frozenset[str] = frozenset({"timeout", "memory_limit", "checker_blocked"})


# The names the harness writes (the Literals above spell the same strings for type checkers).
PASSED: Final = "passed"
WRONG_ANSWER: Final = "wrong_answer"
TIMEOUT: Final = "timeout"
RUNTIME_ERROR: Final = "runtime_error"
MEMORY_LIMIT: Final = "memory_limit"
OUTPUT_LIMIT: Final = "output_limit"
SKIPPED: Final = "skipped"
CHECKER_BLOCKED: Final = "checker_blocked"
OK: Final = "ok"
SYNTAX_ERROR: Final = "syntax_error"
COMPILE_ERROR: Final = "compile_error"
BAD_TESTS: Final = "bad_tests"
HARNESS_ERROR: Final = "harness_error"
NO_CODE: Final = "no_code"
NOT_RUN: Final = "not_run"
SANDBOX_UNAVAILABLE: Final = "sandbox_unavailable"
