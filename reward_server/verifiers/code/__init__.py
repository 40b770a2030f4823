"""The ``code`` verifier (``verifier.py``): runs the completion's program against test cases in
the Docker sandbox. A plug-in like any other: it declares the sandbox's settings section
(``reward_server.sandbox_settings``) and its item and result models (``schemas.py``), and runs
in the server's sandbox service (``reward_server.sandbox_service``), which the app owns.
"""

from reward_server.sandbox_service import SPARE_CONTAINERS
from reward_server.sandbox_settings import SandboxSettings
from reward_server.verifiers.code.schemas import CodeItem, CodeResult, CodeTestResult
from reward_server.verifiers.code.verifier import CodeVerifier

__all__ = ["SPARE_CONTAINERS", "CodeItem", "CodeResult", "CodeTestResult", "CodeVerifier",
           "SandboxSettings"]
