"""Verifier registry: a dict from name to class, filled from entry points and settings.

Installed packages register verifiers under the entry-point group ``reward_server.verifiers``
(this project registers its own built-ins the same way); ``register_verifier`` adds one in
code, and the ``plugins`` setting names extra ``module:Class`` paths.
"""

from __future__ import annotations

import importlib
import re
from importlib.metadata import entry_points

from reward_server.verifiers.base import Verifier

ENTRY_POINT_GROUP = "reward_server.verifiers"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

_registry: dict[str, type[Verifier]] = {}


class PluginError(RuntimeError):
    """A verifier plug-in could not be loaded or is malformed."""


def register_verifier(cls: type[Verifier]) -> type[Verifier]:
    """Register ``cls`` under ``cls.name``; usable as a class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, Verifier)):
        raise PluginError(f"{cls!r} is not a Verifier subclass")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not _NAME.match(name):
        raise PluginError(f"{cls.__qualname__}.name must match {_NAME.pattern}, got {name!r}")
    for attr in ("item_model", "result_model"):
        if not hasattr(cls, attr):
            raise PluginError(f"{cls.__qualname__} has no {attr}")
    if cls.check is Verifier.check and cls.verify is Verifier.verify:
        raise PluginError(f"{cls.__qualname__} implements neither check nor verify")
    existing = _registry.get(name)
    if existing is not None and existing is not cls:
        raise PluginError(f"verifier {name!r} registered twice: {existing} and {cls}")
    _registry[name] = cls
    return cls


def _import_path(path: str) -> type[Verifier]:
    module_name, _, attr = path.partition(":")
    if not attr:
        raise PluginError(f"plugin {path!r} must be 'module:Class'")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"cannot load plugin {path!r}: {exc}") from exc


def discover(plugins: list[str] | tuple[str, ...] = ()) -> dict[str, type[Verifier]]:
    """Load entry points and ``plugins`` into the registry; return a copy of it."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = ep.load()
        except Exception as exc:  # a broken third-party package must say which one it is
            raise PluginError(f"entry point {ep.name!r} ({ep.value}) failed: {exc}") from exc
        register_verifier(cls)
    for path in plugins:
        register_verifier(_import_path(path))
    return dict(_registry)
