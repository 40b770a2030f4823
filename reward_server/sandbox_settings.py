"""The sandbox's settings section: ``--sandbox-<field>`` / ``REWARD_SERVER_SANDBOX_<FIELD>``
(composed into the server's settings by ``reward_server.settings``), handed to the sandbox as a
``SandboxConfig``, with the sessions' (``SessionSettings``).

Its fields are made from ``sandbox.config.SandboxConfig``'s ``setting`` fields, each with its
default, its help and its bounds: a field added there is a setting here with no second edit.
What reading a value from a flag or the environment adds is here, ``Annotated`` on the field,
so it travels into the composed settings class and a bad value is refused at start, naming the
flag: a tuple is a comma-separated list, and a file the sandbox will need must be there."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Annotated, Any, get_type_hints

from pydantic import AfterValidator, BeforeValidator, Field, create_model
from pydantic_settings import NoDecode

from reward_server.run_code.session_settings import SessionSettings
from sandbox.config import SandboxConfig
from sandbox.seccomp import security_opt
from sandbox.tls import check_cert_path

SECTION = "sandbox"  # the settings' prefix: --sandbox-pool-size
# Where containers run and how many, how long a run may wait for one, and how many sessions
# may be open and for how long idle: they decide whether a program runs, never what it does
# (the provenance of /run_code and the sessions leaves them out; the image is named by its id)
CAPACITY = frozenset({
    "image", "docker_host", "docker_hosts", "tls_cert_path", "reap_interval_s", "pool_size",
    "max_uses", "acquire_timeout_s", "session_max_open", "session_max_per_caller",
    "session_reserve", "session_idle_ttl_s"})


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [h.strip() for h in value.split(",") if h.strip()]
    return value


def _readable_profile(value: str) -> str:
    security_opt(value)  # a missing or malformed file stops the start, naming the path
    return value


def _cert_path(value: str | None) -> str | None:
    return check_cert_path(value) if value else None  # a missing file stops the start


CHECKS = {"tls_cert_path": AfterValidator(_cert_path),
          "seccomp_profile": AfterValidator(_readable_profile)}


class SandboxSection(SessionSettings):
    """What the generated ``SandboxSettings`` adds to its fields."""

    def config(self) -> SandboxConfig:
        fields = self.model_dump(exclude=set(SessionSettings.model_fields))
        return SandboxConfig(**{name: tuple(value) if isinstance(value, list) else value
                                for name, value in fields.items()})


def _fields() -> dict[str, Any]:
    """``SandboxConfig``'s settings as pydantic fields: ``(annotation, FieldInfo)``."""
    hints = get_type_hints(SandboxConfig)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(SandboxConfig):
        if "doc" not in f.metadata:
            continue  # the sandbox's own
        annotation, default = hints[f.name], {"default": f.default}
        if annotation == tuple[str, ...]:
            annotation = Annotated[list[str], NoDecode, BeforeValidator(_split_commas)]
            default = {"default_factory": partial(list, f.default)}
        if f.name in CHECKS:
            annotation = Annotated[annotation, CHECKS[f.name]]
        fields[f.name] = (annotation, Field(**default, description=f.metadata["doc"],
                                            **f.metadata["bounds"]))
    if missing := set(CHECKS) - set(fields):
        raise ValueError(f"checks of settings that SandboxConfig does not have: {missing}")
    return fields


SandboxSettings = create_model(
    "SandboxSettings", __base__=SandboxSection, __module__=__name__,
    __doc__="See ``sandbox.config.SandboxConfig`` for each field (``SessionSettings`` for "
            "the sessions').", **_fields())
