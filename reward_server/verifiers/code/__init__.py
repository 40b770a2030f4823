"""The ``code`` verifier (``verifier.py``): runs the completion's program against test cases in
the Docker sandbox. A plug-in like any other: it declares the sandbox's settings section
(``reward_server.sandbox_settings``), its item and result models (``schemas.py``) and owns the
sandbox's lifetime.
"""

from reward_server.sandbox_settings import SandboxSettings
from reward_server.verifiers.code.schemas import CodeItem, CodeResult, CodeTestResult
from reward_server.verifiers.code.verifier import SPARE_CONTAINERS, CodeVerifier

__all__ = ["SPARE_CONTAINERS", "CodeItem", "CodeResult", "CodeTestResult", "CodeVerifier",
           "SandboxSettings"]
