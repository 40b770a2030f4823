"""What a code item looks like on the wire, and what comes back for it."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator, model_validator

from reward_server.verifiers.base import ItemBase, ResultBase
from sandbox import LANGUAGES
from sandbox.harness.statuses import CodeStatus, TestStatus
from sandbox.languages import known_names, resolve


class StdioTest(BaseModel):
    input: str = ""
    output: str


class CodeItem(ItemBase):
    response: str = Field(description="The completion; its last fenced code block is run.")
    language: str = Field("python", description=f"One of: {known_names()} (any case).")
    tests: list[StdioTest] | None = Field(
        None, description="stdin/stdout cases; output compared line by line.")
    test_code: str | None = Field(
        None, description="Python asserts, or a check(candidate) function (HumanEval).")
    entry_point: str | None = Field(None, description="The function test_code calls.")
    tolerance: float | None = Field(
        None, ge=0, description="Numeric tolerance for stdin/stdout tokens (abs and rel).")
    time_limit_s: float | None = Field(
        None, gt=0, description="Per test; clamped to the server's maximum.")
    memory_mb: int | None = Field(None, gt=0, description="Clamped to the server's maximum.")
    all_or_nothing: bool = Field(False, description="Score 1 only if every test passes; the "
                                 "run stops at the first failure (later tests: skipped).")

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str) -> str:
        """An alias (c++, js, golang, ...) becomes the language's name."""
        spec = resolve(value)
        if spec is None:
            raise ValueError(f"unknown language {value!r}; known: {known_names()}")
        return spec.name

    @model_validator(mode="after")
    def _one_form(self) -> CodeItem:
        if (self.tests is None) == (self.test_code is None):
            raise ValueError("give either 'tests' (stdin/stdout) or 'test_code' with "
                             "'entry_point' (assertions), not both or neither")
        if self.tests is not None and not self.tests:
            raise ValueError("'tests' is empty")
        if self.test_code is not None:
            if not LANGUAGES[self.language].supports_assertions:
                raise ValueError(f"test_code is supported for python only, not "
                                 f"{self.language!r}")
            if not self.entry_point or not self.entry_point.isidentifier():
                raise ValueError("'entry_point' (a function name) is required with test_code")
        return self


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
