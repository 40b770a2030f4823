"""The limit clamp every run's limits go through (``sandbox.config.capped``)."""

from __future__ import annotations

import pytest

from sandbox.config import capped


@pytest.mark.parametrize(("ask", "default", "most", "limit"), [
    (None, 5.0, 30.0, 5.0),  # nothing asked: the default
    (0, 256, 768, 256),  # 0 is nothing asked, as SandboxFusion's 0 timeouts
    (2.5, 5.0, 30.0, 2.5),  # less than the default: as asked
    (60.0, 5.0, 30.0, 30.0),  # more than the server allows: its most
    (None, 40.0, 30.0, 30.0),  # a default past the most is capped too
])
def test_capped(ask: float | None, default: float, most: float, limit: float) -> None:
    assert capped(ask, default, most) == limit
