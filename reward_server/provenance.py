"""What produced a verdict: each verifier's provenance block, computed once per process.

A verdict is a function of the item and of what scored it: the verifier's code and the
version it shipped in, its settings, the libraries under it and, for what runs in the
sandbox, the image. Every response names these (``Provenance``, per verifier), so a team
that upgrades the server can tell which stored rewards may change and score them again
(``reward_server.rescore``; NeMo Gym's ``reverify`` and Prime's replay answer the same need).

What runs programs for a caller (``/run_code``, ``/run_jupyter``, a session's cells) is named
the same way, in one block of its own (``SandboxProvenance``): its code and the harness's, the
sandbox settings that change what a program does, the runtime and the image.

Everything but the sandbox image and runtime is fixed for the process's life and computed at
start (the code digest reads the source of the verifier's modules and of every module they
import, once: ``source_digest``); the image id is the engine's, read when the sandbox pool
connects or makes a container (an image rebuilt under the same tag is a new id), and so is
the runtime where the setting leaves it to the engine (its default, which may be gVisor's),
so a block is rebuilt only when one of them changes. A response costs a dict lookup.

A session's container outlives a rebuilt image or a changed default: its answers name the
block of the container it has (``sandbox_of``), fixed when the container was made.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from importlib.metadata import (
    Distribution,
    PackageNotFoundError,
    distributions,
    packages_distributions,
    version,
)
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, SecretStr

from reward_server import source_digest
from reward_server.sandbox_settings import CAPACITY
from reward_server.verifiers.base import ResultBase, Verifier
from sandbox.seccomp import security_opt

if TYPE_CHECKING:
    from reward_server.sandbox_service import SandboxService
    from reward_server.sandbox_settings import SandboxSection

DIGEST_CHARS = 16  # 64 bits of sha256: names a version, is no secret to keep
# Source outside a verifier's own package that it imports and that is part of its verdicts
# (the core's text primitives, the sandbox's host side); third-party code is named by version
CORE_PACKAGES = frozenset({"reward_server", "sandbox"})
# What runs a /run_code snippet, a /run_jupyter notebook and a session's cells: the endpoints'
# package and the harness, all of its files (it is copied whole into the image, and starts
# some of them, the session kernel, as files rather than imports)
SANDBOX_PACKAGES = ("reward_server.run_code", "sandbox.harness")
MAX_CONTAINER_BLOCKS = 64  # sandbox blocks kept by (image, runtime): a few in a process's life


class Provenance(BaseModel):
    """What produced a verifier's results. Two results whose blocks have the same
    ``fingerprint`` came from the same code, settings, libraries and image: the same item
    gets the same verdict (up to what load decides: a timeout on a busy machine)."""

    verifier: str = Field(description="The verifier's name.")
    version: str = Field(description="Version of the distribution that ships the verifier "
                         "(verifiable-rewards for the built-ins; a plug-in's own package).")
    code: str = Field(description="sha256 (16 hex) of the verifier's source: its package's "
                      "files and the server modules they import, however many imports away.")
    settings: str = Field(description="sha256 (16 hex) of the settings that change verdicts: "
                          "its section minus capacity (workers, engines) and secrets, and its "
                          "check limits.")
    libraries: dict[str, str] = Field(description="Version of each library its verdicts rest "
                                      "on (math-verify, SymPy, reasoning-gym, ...), and python.")
    sandbox_image: str | None = Field(None, description="Id of the sandbox image (Docker's "
                                      "sha256:...) for a verifier that runs in the sandbox; "
                                      "several ids comma-separated when engines differ; null "
                                      "before the sandbox first connected.")
    sandbox_runtime: str | None = Field(None, description="The OCI runtime its containers run "
                                        "under (runc, runsc for gVisor, ...) for a verifier "
                                        "that runs in the sandbox: a program's time and the "
                                        "calls it may make differ by runtime, so its verdicts "
                                        "may; null as sandbox_image is.")
    fingerprint: str = Field(description="sha256 (16 hex) of all of the above.")


class SandboxProvenance(BaseModel):
    """What ran the programs of a ``/run_code``, ``/run_jupyter`` or session answer: the same
    ``fingerprint``, the same code, limits, runtime and image (the answer's ``limits`` are
    what one run was allowed under these). docs/rescore.md has each field."""

    version: str = Field(description="Version of verifiable-rewards.")
    code: str = Field(description="sha256 (16 hex) of the endpoints' and the harness's "
                      "source, and of every server and sandbox module they import.")
    settings: str = Field(description="sha256 (16 hex) of the sandbox settings that change "
                          "what a program does or may do; not where or how many run.")
    runtime: str | None = Field(None, description="The OCI runtime the containers run "
                                "under: the runtime setting, or where it is unset the "
                                "engine's default (its DefaultRuntime: runc, runsc for "
                                "gVisor, or another); several comma-separated when engines "
                                "differ; null before the sandbox first connected.")
    sandbox_image: str | None = Field(None, description="Docker's id of the sandbox image, "
                                      "as in a verifier's block.")
    fingerprint: str = Field(description="sha256 (16 hex) of all of the above.")


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def own_modules(module: str, roots: source_digest.Roots) -> list[str]:
    """A verifier's own modules: its package's, when its module is a package or in one (the
    built-ins are packages of several modules), else its one module."""
    file = source_digest.module_file(module, roots)
    package = module if file is None or file.name == "__init__.py" else module.rpartition(".")[0]
    return source_digest.package_modules(package or module, roots)


def closure_digest(modules: Iterable[str], roots: source_digest.Roots) -> str:
    """sha256 (16 hex) of ``modules`` and every module under ``roots`` they import,
    transitively (reward_server/source_digest.py)."""
    return source_digest.source_digest(source_digest.closure(modules, roots))[:DIGEST_CHARS]


@cache
def code_digest(cls: type[Verifier]) -> str:
    """sha256 of ``cls``'s own modules and every server, sandbox and own module they import,
    however many imports away."""
    top = cls.__module__.partition(".")[0]
    roots = source_digest.package_roots(CORE_PACKAGES | {top})
    return closure_digest(own_modules(cls.__module__, roots), roots)


def _top_level(dist: Distribution) -> set[str]:
    """The top-level packages ``dist`` declares (its top_level.txt): a small file, where
    inferring them reads its whole file list."""
    return set((dist.read_text("top_level.txt") or "").split())


@cache
def _declared() -> dict[str, list[str]]:
    """Top-level package to the distributions that declare it, from every top_level.txt."""
    found: dict[str, list[str]] = {}
    for dist in distributions():
        for top in _top_level(dist):
            found.setdefault(top, []).append(dist.metadata["Name"])
    return found


@cache
def _distributions() -> dict[str, list[str]]:
    return packages_distributions()  # reads every installed distribution's file list: once


@cache
def distribution_of(top: str) -> list[str]:
    """The distributions that ship the top-level package ``top``, cheapest answer first: the
    one named after it that declares it (most do), then any that declares it; only where none
    does, every distribution's file list (hundreds of files each: seconds on a loaded machine
    at every server start)."""
    try:
        named = Distribution.from_name(top)
    except PackageNotFoundError:
        pass
    else:
        if top in _top_level(named):
            return [named.metadata["Name"]]
    return _declared().get(top) or _distributions().get(top, [])


def distribution_version(cls: type) -> str:
    """The version of the installed distribution that ships ``cls``'s top-level package."""
    top = cls.__module__.partition(".")[0]
    for dist in distribution_of(top):
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


def sandbox_settings(section: SandboxSection) -> dict[str, Any]:
    """The sandbox settings that change what a ``/run_code``, ``/run_jupyter`` or session
    program does: all but its ``CAPACITY`` settings, with the seccomp profile's text under
    runc and under gVisor (which applies is the block's ``runtime``, known only once the
    engine says what its default is)."""
    values = {name: value for name, value in section.model_dump().items()
              if name not in CAPACITY}
    values["security_opt"] = {"runc": security_opt(section.seccomp_profile, False),
                              "gvisor": security_opt(section.seccomp_profile, True)}
    return values


def _sandbox_fixed(sandbox: SandboxService) -> dict[str, Any]:
    """A sandbox block but its image: fixed for the process's life."""
    roots = source_digest.package_roots(CORE_PACKAGES)
    modules = [m for package in SANDBOX_PACKAGES
               for m in source_digest.package_modules(package, roots)]
    return {"version": distribution_version(type(sandbox)),
            "code": closure_digest(modules, roots),
            "settings": _digest(sandbox_settings(sandbox.settings))}


def _engines(sandbox: SandboxService | None) -> tuple[str | None, str | None]:
    """The sandbox's image ids and runtimes as a block names them (None: not known yet)."""
    if sandbox is None:
        return None, None
    return ",".join(sandbox.image_ids) or None, ",".join(sandbox.runtimes) or None


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
        self._sandbox_fixed = _sandbox_fixed(sandbox) if sandbox is not None else None
        self._engines: tuple[str | None, str | None] = (None, None)  # image, runtime
        self._of_container: dict[tuple[str | None, str | None], SandboxProvenance] = {}
        self._of_results: dict[tuple[str, str | None, str | None], Provenance] = {}
        self._build()

    def _build(self) -> None:
        image, runtime = self._engines
        blocks = {}
        for name, fixed in self._fixed.items():
            sandboxed = name in self._in_sandbox
            block = {**fixed, "sandbox_image": image if sandboxed else None,
                     "sandbox_runtime": runtime if sandboxed else None}
            blocks[name] = Provenance(**block, fingerprint=_digest(block))
        self._blocks = blocks
        self._sandbox_block = self.sandbox_of(*self._engines)

    def current(self) -> dict[str, Provenance]:
        """Every verifier's block as of now (rebuilt when the sandbox's image or runtime
        changed)."""
        engines = _engines(self._sandbox)
        if engines != self._engines:
            self._engines = engines
            self._build()
        return self._blocks

    def sandbox_of(self, image: str | None, runtime: str | None) -> SandboxProvenance | None:
        """The sandbox block of a container of ``image`` under ``runtime`` (a session's);
        None on a server without a sandbox."""
        if self._sandbox_fixed is None:
            return None
        key = (image, runtime)
        if key not in self._of_container:
            if len(self._of_container) >= MAX_CONTAINER_BLOCKS:  # images rebuilt all day
                self._of_container.clear()
            block = {**self._sandbox_fixed, "runtime": runtime, "sandbox_image": image}
            self._of_container[key] = SandboxProvenance(**block, fingerprint=_digest(block))
        return self._of_container[key]

    def sandbox(self, ran_in: tuple[str | None, str | None] | None = None
                ) -> SandboxProvenance | None:
        """The block of what ran ``/run_code``, ``/run_jupyter`` and session programs: of
        the container that ran it where one did (``ran_in``: its image and runtime), else as
        of now; None on a server without a sandbox."""
        self.current()
        return self._sandbox_block if ran_in is None else self.sandbox_of(*ran_in)

    def of(self, scored: Iterable[tuple[str | None, ResultBase]]) -> dict[str, Provenance]:
        """The blocks of the verifiers of ``scored`` (a response's results, by verifier
        name), once each; an unknown or missing name (a refused item's) has none. A
        verifier whose results ran in sandbox containers (``ResultBase.ran_in``, kept with a
        cached result) gets the block of those containers' images and runtimes, several
        comma-separated, not the pool's as of now: a warm container outlives an image
        rebuilt under the same tag, and a cached verdict was computed where it was."""
        blocks = self.current()
        ran: dict[str, set[tuple[str | None, str | None]]] = {}
        for name, result in scored:
            if name is None or name not in blocks:
                continue
            origins = ran.setdefault(name, set())
            if name in self._in_sandbox:  # (a private attribute is a slow read: only these)
                origins.update(result.ran_in)
        return {name: self._ran_block(name, origins) if origins else blocks[name]
                for name, origins in ran.items()}

    def of_verifier(self, name: str, results: Iterable[ResultBase]) -> Provenance | None:
        """``of`` for one verifier's results (``/v1/verify/<name>``): its block, even for no
        results; None for a name the server does not know."""
        return self.of((name, r) for r in results).get(name) or self.current().get(name)

    def _ran_block(self, name: str, origins: set[tuple[str | None, str | None]]
                   ) -> Provenance:
        image = ",".join(sorted({i for i, _ in origins if i is not None})) or None
        runtime = ",".join(sorted({r for _, r in origins if r is not None})) or None
        if name not in self._in_sandbox:
            return self._blocks[name]
        key = (name, image, runtime)
        if key not in self._of_results:
            if len(self._of_results) >= MAX_CONTAINER_BLOCKS:  # images rebuilt all day
                self._of_results.clear()
            block = {**self._fixed[name], "sandbox_image": image, "sandbox_runtime": runtime}
            self._of_results[key] = Provenance(**block, fingerprint=_digest(block))
        return self._of_results[key]
