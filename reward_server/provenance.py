"""What produced a verdict: each verifier's provenance block, computed once per process.

A verdict is a function of the item and of what scored it: the verifier's code and the
version it shipped in, its settings, the libraries under it and, for what runs in the
sandbox, the image. Every response names these (``Provenance``, per verifier), so a team
that upgrades the server can tell which stored rewards may change and score them again
(``reward_server.rescore``; NeMo Gym's ``reverify`` and Prime's replay answer the same need).

Everything but the sandbox image is fixed for the process's life and computed at start (the
code digest reads the verifier's source files once); the image id is the engine's, read when
the sandbox pool connects or makes a container (an image rebuilt under the same tag is a new
id), so a block is rebuilt only when that id changes. A response costs a dict lookup.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import platform
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, SecretStr

from reward_server.verifiers.base import Verifier

if TYPE_CHECKING:
    from reward_server.sandbox_service import SandboxService

DIGEST_CHARS = 16  # 64 bits of sha256: names a version, is no secret to keep
# Source outside a verifier's own package that it imports and that is part of its verdicts
# (the core's text primitives, the sandbox's host side); third-party code is named by version
CORE_PACKAGES = frozenset({"reward_server", "sandbox"})


class Provenance(BaseModel):
    """What produced a verifier's results. Two results whose blocks have the same
    ``fingerprint`` came from the same code, settings, libraries and image: the same item
    gets the same verdict (up to what load decides: a timeout on a busy machine)."""

    verifier: str = Field(description="The verifier's name.")
    version: str = Field(description="Version of the distribution that ships the verifier "
                         "(verifiable-rewards for the built-ins; a plug-in's own package).")
    code: str = Field(description="sha256 (16 hex) of the verifier's source: its package's "
                      "files and the server modules they import.")
    settings: str = Field(description="sha256 (16 hex) of the settings that change verdicts: "
                          "its section minus capacity (workers, engines) and secrets, and its "
                          "check limits.")
    libraries: dict[str, str] = Field(description="Version of each library its verdicts rest "
                                      "on (math-verify, SymPy, reasoning-gym, ...), and python.")
    sandbox_image: str | None = Field(None, description="Id of the sandbox image (Docker's "
                                      "sha256:...) for a verifier that runs in the sandbox; "
                                      "several ids comma-separated when engines differ; null "
                                      "before the sandbox first connected.")
    fingerprint: str = Field(description="sha256 (16 hex) of all of the above.")


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def _origin(module_name: str) -> Path | None:
    """The source file of ``module_name``, without importing it; None if it has none."""
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None) if module is not None else None
    if file is None:
        try:
            spec = importlib.util.find_spec(module_name)
        except (ImportError, ValueError):
            return None
        file = spec.origin if spec is not None else None
    return Path(file) if file and file.endswith(".py") else None


def _own_files(cls: type) -> list[Path]:
    """The verifier's own source: its package's directory when its module is a package or in
    one (the built-ins are packages of several modules), else its one module."""
    module_name = cls.__module__
    module = sys.modules[module_name]
    if hasattr(module, "__path__"):  # the class is in a package's __init__
        root = Path(module.__file__).parent  # type: ignore[arg-type]
    elif "." in module_name:
        root = Path(module.__file__).parent  # type: ignore[arg-type]
    else:
        return [Path(module.__file__)]  # type: ignore[arg-type]
    return sorted(root.rglob("*.py"))


def _imported(files: Iterable[Path], packages: frozenset[str]) -> set[Path]:
    """The files of the modules of ``packages`` that ``files`` import (one level down: the
    primitives a verifier uses, not the whole server behind them)."""
    found: set[Path] = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_bytes())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for name in names:
                if name.partition(".")[0] in packages and (origin := _origin(name)):
                    found.add(origin)
    return found


@cache
def code_digest(cls: type[Verifier]) -> str:
    """sha256 of ``cls``'s source files and the server and sandbox modules they import, by
    path relative to their package root and content."""
    own = _own_files(cls)
    top = cls.__module__.partition(".")[0]
    files = set(own) | _imported(own, CORE_PACKAGES | {top})
    # each file by its path below the directory its top-level package is in: the same
    # source gives the same digest in any checkout or site-packages
    roots = [p.parent.parent if p.name == "__init__.py" else p.parent
             for p in map(_origin, CORE_PACKAGES | {top}) if p is not None]
    h = hashlib.sha256()
    for file in sorted(files):
        base = next((r for r in roots if file.is_relative_to(r)), file.parent)
        h.update(file.relative_to(base).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return h.hexdigest()[:DIGEST_CHARS]


@cache
def _distributions() -> dict[str, list[str]]:
    return packages_distributions()  # reads every installed distribution's file list: once


def distribution_version(cls: type) -> str:
    """The version of the installed distribution that ships ``cls``'s top-level package."""
    top = cls.__module__.partition(".")[0]
    for dist in _distributions().get(top, []):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return str(getattr(sys.modules.get(top), "__version__", "unknown"))


def library_versions(names: Iterable[str]) -> dict[str, str]:
    """Each distribution's installed version ("missing" when it is not installed: an
    optional verifier's library can be absent until an item needs it), and python's."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def verdict_settings(verifier: Verifier) -> dict[str, Any]:
    """The settings that change ``verifier``'s verdicts: its own section but its
    ``capacity_settings`` and secrets, and its check limits."""
    cls = type(verifier)
    values: dict[str, Any] = {"check_timeout_s": cls.check_timeout_s,
                              "check_memory_mb": cls.check_memory_mb}
    if verifier.config is not None:
        for name in type(verifier.config).model_fields:
            value = getattr(verifier.config, name)
            if name not in cls.capacity_settings and not isinstance(value, SecretStr):
                values[name] = value
    return values


def _sandbox_image(sandbox: SandboxService | None) -> str | None:
    if sandbox is None:
        return None
    return ",".join(sandbox.image_ids) or None


class Provenances:
    """The blocks of a server's verifiers, by name; made once, at start."""

    def __init__(self, verifiers: Mapping[str, Verifier],
                 sandbox: SandboxService | None = None) -> None:
        self._sandbox = sandbox
        self._fixed: dict[str, dict[str, Any]] = {}
        self._in_sandbox: set[str] = set()
        for name, verifier in verifiers.items():
            cls = type(verifier)
            self._fixed[name] = {
                "verifier": name, "version": distribution_version(cls),
                "code": code_digest(cls), "settings": _digest(verdict_settings(verifier)),
                "libraries": library_versions(cls.libraries)}
            if cls.use_sandbox is not Verifier.use_sandbox:  # it keeps the sandbox it is given
                self._in_sandbox.add(name)
        self._image: str | None = None
        self._blocks = self._build()

    def _build(self) -> dict[str, Provenance]:
        blocks = {}
        for name, fixed in self._fixed.items():
            block = {**fixed, "sandbox_image": self._image if name in self._in_sandbox
                     else None}
            blocks[name] = Provenance(**block, fingerprint=_digest(block))
        return blocks

    def current(self) -> dict[str, Provenance]:
        """Every verifier's block as of now (rebuilt when the sandbox's image changed)."""
        image = _sandbox_image(self._sandbox)
        if image != self._image:
            self._image = image
            self._blocks = self._build()
        return self._blocks

    def of(self, names: Iterable[str | None]) -> dict[str, Provenance]:
        """The blocks of the verifiers ``names`` (a response's), once each; an unknown or
        missing name (a refused item's) has none."""
        blocks = self.current()
        return {name: blocks[name] for name in dict.fromkeys(names)
                if name is not None and name in blocks}
