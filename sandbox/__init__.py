"""Runs untrusted code in Docker containers: the image, the harness inside it, the warm
container pool and the runner for one execution."""

from sandbox.config import SandboxConfig
from sandbox.errors import SandboxUnavailable
from sandbox.languages import LANGUAGES, LanguageSpec
from sandbox.runner import Execution, ExecutionResult, Sandbox, TestCase, TestResult

__all__ = [
    "LANGUAGES",
    "Execution",
    "ExecutionResult",
    "LanguageSpec",
    "Sandbox",
    "SandboxConfig",
    "SandboxUnavailable",
    "TestCase",
    "TestResult",
]
