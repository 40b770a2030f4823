"""The code verifier's tests' fixture: a client of the shared server, once its sandbox answers."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from reward_server.testing import ServerProcess, wait_for_sandbox
from tests.helpers.code import code_client


@pytest.fixture(scope="module")
def code_http(server: ServerProcess) -> Iterator[httpx.Client]:
    """A client of the shared server (runc), once its sandbox answers."""
    wait_for_sandbox(server.url, timeout_s=180)
    with code_client(server) as client:
        yield client
