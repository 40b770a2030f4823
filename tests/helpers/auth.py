"""Credentials for servers that require them."""

from __future__ import annotations

import os
from pathlib import Path


def tokens_file(path: Path, teams: dict[str, str]) -> Path:
    """A tokens file (``name:token``, one team a line) at ``path``, readable by its owner only."""
    path.write_text("# name:token, one team a line\n" + "".join(
        f"{name}:{token}\n" for name, token in teams.items()))
    os.chmod(path, 0o600)
    return path
