"""What a code item looks like on the wire, and what comes back for it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr, field_validator, model_validator

from reward_server.verifiers.base import ItemBase, ResultBase
from reward_server.verifiers.code.extract import extract_code
from reward_server.verifiers.code.formats import (
    check_form,
    execution_key,
    execution_of,
    function_name,
    program_of,
)
from sandbox import Execution
from sandbox.harness.statuses import CodeStatus, TestStatus
from sandbox.languages import known_names, resolve


class StdioTest(BaseModel):
    """A stdin/stdout case (text, or APPS's list of lines), or with ``fn_name`` a call:
    ``input`` the JSON list of arguments (a bare string is one argument) and ``output`` the
    JSON return value (as text, or as the values themselves)."""

    input: str | list[Any] = ""
    output: Any


def canonical_language(value: str) -> str:
    """An alias (c++, js, golang, ...) becomes the language's name; an unknown one names the
    known ones."""
    spec = resolve(value)
    if spec is None:
        raise ValueError(f"unknown language {value!r}; known: {known_names()}")
    return spec.name


class CheckerSpec(BaseModel):
    """A testlib-style checker: run as ``checker <input> <output> <answer>``, exit 0 accepts
    (1, 2, 4, 7, 8 reject); anything else, or failing to compile, makes the item bad_tests."""

    language: str = Field("cpp", description="The checker's language (testlib's is C++).")
    source: str = Field(description="The checker's source.")

    _language = field_validator("language")(canonical_language)


class CodeItem(ItemBase):
    response: str = Field(description="The completion; its last fenced code block is run "
                          "(after 'prompt'), or the whole response when it has no fence.")
    language: str = Field("python", description=f"One of: {known_names()} (any case).")
    tests: list[StdioTest] | None = Field(
        None, description="stdin/stdout cases; output compared line by line.")
    test_code: str | None = Field(
        None, description="Python asserts, or a check(candidate) function (HumanEval).")
    entry_point: str | None = Field(
        None, description="The function test_code calls (as 'candidate' too); required with "
        "a check(candidate) function. A method of class Solution also counts, named or "
        "written Solution().name (LeetCodeDataset).")
    prompt: str | None = Field(
        None, description="Text the dataset's harness puts before the completion, which runs "
        "prompt + program: HumanEval's prompt or starter code (a completion that is only the "
        "function's body continues it), LeetCodeDataset's prompt (imports, inf, "
        "ListNode/TreeNode). Python: before the program when the two parse together, else "
        "the program alone if it parses (MBPP's prose prompt). With Python asserts or calls "
        "its statements that parse, less stubs and the entry point, are trusted setup of the "
        "test process (its helpers).")
    test_setup: str | None = Field(
        None, description="Trusted Python run in the test process before the test code "
        "(MBPP's test_setup_code; HumanEval prompt helpers the dataset trusts over the "
        "solution's copy). It cannot call the solution; if it fails: bad_tests.")
    test_list: list[str] | None = Field(
        None, description="MBPP: assert statements, one test each; they call the solution's "
        "functions by name.")
    test_setup_code: str | None = Field(None, description="MBPP's name for test_setup.")
    challenge_test_list: list[str] | None = Field(
        None, description="MBPP: more asserts, run after test_list.")
    test_imports: list[str] | None = Field(
        None, description="Sanitized MBPP: import lines run before the tests in the test "
        "process, and before the solution in its process (MBPP runs them in one namespace).")
    fn_name: str | None = Field(
        None, description="Call-based tests (APPS, TACO, PrimeIntellect, LeetCode): 'tests' "
        "call this function (or Solution().fn_name) with the JSON list 'input' and compare "
        "the return value with the JSON 'output' as APPS does (a tuple is a list; [value] "
        "wraps value).")
    call_input: Literal["list", "lines"] = Field(
        "list", description="With fn_name: each 'input' is the JSON list of arguments "
        "(APPS, TACO), or 'lines': one JSON value per line, one per argument (PrimeIntellect "
        "as verl's prime_code reads it, LiveCodeBench); 'lines' outputs are compared as "
        "LiveCodeBench does (a tuple is a list, then ==), not with APPS's wrapper rule.")
    checker: CheckerSpec | None = Field(
        None, description="stdin/stdout problems with several correct outputs: a trusted "
        "program that judges each output instead of the line-by-line comparison.")
    compare: Literal["lines", "tokens", "apps", "lcb"] | None = Field(
        None, description="How stdin/stdout outputs compare, as the dataset's grader does: "
        "'lines' (default: each line's tokens, trailing blank lines ignored), 'tokens' (the "
        "whole output's tokens, line breaks as spaces), 'apps' (APPS's testing_util: lines "
        "stripped, blank ones dropped, each line's tokens equal, or numbers within 1e-5), "
        "'lcb' (LiveCodeBench's grade_stdio: lines stripped, tokens equal as decimals). An "
        "expected integer compares exactly.")
    tolerance: float | None = Field(
        None, ge=0, description="With compare 'lines' or 'tokens': two decimal tokens within "
        "it (abs or rel) are equal; an expected integer compares exactly with a printed value "
        "that is integral (1e12 is 1000000000000, 1.000001e12 is not).")
    time_limit_s: float | None = Field(
        None, gt=0, description="Per test; clamped to the server's maximum.")
    memory_mb: int | None = Field(None, gt=0, description="Clamped to the server's maximum.")
    output_limit_mb: int | None = Field(
        None, gt=0, description="Output one test may write (MiB); clamped to the server's "
        "maximum (max_output_limit_bytes).")
    budget_s: float | None = Field(
        None, gt=0, description="Wall-clock budget of the whole item; clamped to the "
        "server's maximum (max_item_budget_s).")
    all_or_nothing: bool = Field(False, description="Score 1 only if every test passes; the "
                                 "run stops at the first failure (later tests: skipped).")

    _language = field_validator("language")(canonical_language)
    _function = field_validator("entry_point", "fn_name")(function_name)
    _execution: Execution = PrivateAttr()
    _run: Execution | None = PrivateAttr()
    _key: str = PrivateAttr()

    @model_validator(mode="after")
    def _one_form(self) -> CodeItem:
        check_form(self)
        if self.checker is not None and (self.tests is None or self.fn_name is not None):
            raise ValueError("'checker' goes with stdin/stdout 'tests' (CodeContests, "
                             "Codeforces), not with function or assertion tests")
        self._execution = execution_of(self, source="")  # the calls decoded once, here
        # the program and the result cache's key, here too: validation runs on a thread for
        # a large body, and the key costs what the tests' values number (a million: 0.1 s)
        source = extract_code(self.response)
        self._run = replace(self._execution, **program_of(self, source)) \
            if source.strip() else None
        self._key = "" if self._run is None else execution_key(self._run)
        return self

    @property
    def execution(self) -> Execution:
        """The sandbox execution of this item's tests, without the program (the verifier
        adds the one it extracts from ``response``)."""
        return self._execution

    @property
    def run(self) -> Execution | None:
        """The execution with the program extracted from ``response``; None when the
        response holds no code."""
        return self._run

    @property
    def key(self) -> str:
        """The result cache's key of ``run``: every field of it, so a new one can never make
        two items share a key (empty without a program)."""
        return self._key


class CodeTestResult(BaseModel):
    status: TestStatus
    time_ms: float
    stderr: str = Field("", description="The tail of the program's stderr.")


class CodeResult(ResultBase):
    score: float | None
    passed: int
    total: int
    status: CodeStatus
    detail: str | None = None
    tests: list[CodeTestResult] = Field(default_factory=list)
