"""The seccomp profile every sandbox container is created with: ``sandbox/seccomp.json``
(what it blocks and where it comes from: ``sandbox/seccomp_generate.py``; under gVisor its
variant ``sandbox/seccomp-gvisor.json``), or an operator's own, or the engine's built-in
default."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

PROFILE = Path(__file__).resolve().parent / "seccomp.json"
PROFILE_GVISOR = PROFILE.with_name("seccomp-gvisor.json")
GVISOR_RUNTIME = "runsc"  # the runtime name gVisor's docs register it under
ENGINE_DEFAULT = "engine-default"  # the engine's built-in profile, whatever its version


def is_gvisor(runtime: str, registered: Mapping[str, Any] | None = None) -> bool:
    """Whether ``runtime`` is gVisor's runsc: by the name its docs give it, or by the binary
    the engine registered it with (``registered``: docker info's ``Runtimes``), since an
    operator may register it as anything, or make it the engine's default unnamed."""
    if runtime == GVISOR_RUNTIME:
        return True
    entry = (registered or {}).get(runtime)
    path = entry.get("path") if isinstance(entry, Mapping) else None
    return isinstance(path, str) and Path(path).name == GVISOR_RUNTIME


@lru_cache
def security_opt(profile: str = "", gvisor: bool = False) -> tuple[str, ...]:
    """Docker ``SecurityOpt`` for ``profile``: "" is ours (with ``gvisor`` its gVisor
    variant, which runsc applies only when registered with ``--oci-seccomp``),
    ``ENGINE_DEFAULT`` the engine's, anything else a path to a profile JSON. The API takes
    the profile's text, not a path, so a remote engine gets the same profile."""
    if profile == ENGINE_DEFAULT:
        return ("no-new-privileges",)
    ours = PROFILE_GVISOR if gvisor else PROFILE
    path = Path(profile) if profile else ours
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"seccomp profile {str(path)!r} is not a readable JSON file: {exc}"
                         ) from None
    if not isinstance(data, dict) or "defaultAction" not in data:
        raise ValueError(f"seccomp profile {str(path)!r} has no defaultAction")
    return ("no-new-privileges", "seccomp=" + json.dumps(data, separators=(",", ":")))
