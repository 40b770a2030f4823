"""Server settings: environment variables (prefix ``REWARD_SERVER_``), an optional ``.env``
file, and the ``reward-server`` command line, all through pydantic-settings so the three
agree and ``--help`` lists every one.

One home per setting: the server's own are ``ServerSettings`` (in ``server_settings``, below
the verifiers, which read it); each verifier declares its section
(``Verifier.settings_model``, a pydantic model, under ``settings_prefix``), and
``compose_settings`` builds one class with every section's fields flattened under its prefix
(``math_timeout_s``: ``--math-timeout-s``, ``REWARD_SERVER_MATH_TIMEOUT_S``). A verifier gets
its section back as ``Verifier.config``. ``docs/settings.md`` is generated from the composed
class (``python -m reward_server.settings_doc``); a test fails when the two disagree.

Worker processes (``--workers``) receive the settings as one JSON file that the CLI wrote
(``REWARD_SERVER_SETTINGS_FILE``), not re-read from the environment.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, create_model

from reward_server.server_settings import ServerSettings
from reward_server.verifiers.base import Verifier
from reward_server.verifiers.registry import discover

SETTINGS_FILE_ENV = "REWARD_SERVER_SETTINGS_FILE"


def sections_of(verifiers: Mapping[str, type[Verifier]]) -> dict[str, type[BaseModel]]:
    """Each verifier's declared section, by prefix; two verifiers may not claim one prefix."""
    sections: dict[str, type[BaseModel]] = {}
    for name, cls in sorted(verifiers.items()):
        model = cls.settings_model
        if model is None:
            continue
        prefix = cls.settings_prefix or name
        if sections.get(prefix, model) is not model:
            raise ValueError(f"settings prefix {prefix!r} is claimed by two verifiers")
        sections[prefix] = model
    return sections


def compose_settings(sections: Mapping[str, type[BaseModel]]) -> type[ServerSettings]:
    """``ServerSettings`` plus each section's fields as ``<prefix>_<field>`` (their
    validators, defaults and descriptions kept)."""
    fields: dict[str, Any] = {}
    for prefix, model in sorted(sections.items()):
        for name, info in model.model_fields.items():
            flat = f"{prefix}_{name}"
            if flat in ServerSettings.model_fields or flat in fields:
                raise ValueError(f"setting {flat!r} is declared twice")
            fields[flat] = (info.annotation, copy.copy(info))
    cls = create_model("Settings", __base__=ServerSettings, **fields)
    cls.__doc__ = "The server's settings with every verifier's section (compose_settings)."
    cls.sections = dict(sections)
    return cls


def settings_class(plugins: list[str] | tuple[str, ...] = ()) -> type[ServerSettings]:
    """The settings class for the installed verifiers and ``plugins``."""
    return compose_settings(sections_of(discover(plugins)))


@lru_cache
def get_settings() -> ServerSettings:
    """The process's settings, read once: from the file the CLI wrote for its workers, else
    the environment. Tests pass their own settings to create_app."""
    path = os.environ.get(SETTINGS_FILE_ENV)
    if path:
        data = json.loads(Path(path).read_text())
        return settings_class(data.get("plugins", ())).model_validate(data)
    plugins = ServerSettings().plugins
    return settings_class(plugins)()


def __getattr__(name: str) -> Any:
    """``Settings``: the class for the installed verifiers (composed on first use, since it
    imports them), for ``Settings(math_timeout_s=2)`` as before sections existed."""
    if name == "Settings":
        cls = globals()["Settings"] = settings_class()
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
