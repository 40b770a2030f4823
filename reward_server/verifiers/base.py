"""The plug-in interface every verifier implements.

A verifier owns a request item schema, a result schema and an async ``verify`` that turns a
batch of items into results in the same order. The server core builds
``POST /v1/verify/<name>`` and the ``/v1/rewards`` dispatch from these attributes alone, so a
new verifier never edits the core.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from reward_server.server_settings import ServerSettings

if TYPE_CHECKING:
    from reward_server.process_pool import TimeoutPool


class ItemBase(BaseModel):
    """Fields common to every item; verifiers subclass it."""

    model_config = ConfigDict(extra="forbid")


class ResultBase(BaseModel):
    """Every result carries a score and a status.

    ``score`` is None when the item could not be scored for a reason outside the response
    (the sandbox is down): the trainer must not read that as a reward of 0.
    """

    score: float | None = Field(description="Reward in [0, 1]; null when unscorable.")
    status: str = Field(description="Verifier-specific status, e.g. 'ok' or 'timeout'.")


class Verifier(ABC):
    """Subclass, set the three class attributes, implement ``verify``, then register."""

    name: ClassVar[str]
    item_model: ClassVar[type[ItemBase]]
    result_model: ClassVar[type[ResultBase]]
    description: ClassVar[str] = ""
    # Its own settings, if any: a pydantic model whose fields the server composes under
    # ``settings_prefix`` (default: ``name``), so ``--<prefix>-<field>`` and
    # ``REWARD_SERVER_<PREFIX>_<FIELD>`` set them and ``--help`` lists them.
    settings_model: ClassVar[type[BaseModel] | None] = None
    settings_prefix: ClassVar[str | None] = None

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings  # the server's (cache size, budgets, ...)
        self.config: BaseModel | None = None  # its own section, validated
        if self.settings_model is not None:
            self.config = settings.section(self.settings_prefix or self.name)

    async def start(self) -> None:
        """Acquire resources (process pools, Docker clients); called once at server start."""

    async def stop(self) -> None:
        """Release everything ``start`` acquired; called once at shutdown."""

    def bind(self, verifiers: Mapping[str, Verifier]) -> None:
        """Called once every verifier has started: a verifier that works in another's
        resource (reasoning_gym in the code verifier's sandbox) takes it here."""

    @abstractmethod
    async def verify(self, items: Sequence[ItemBase]) -> list[ResultBase]:
        """Score ``items``; one result per item, same order. Never raise for bad content:
        a wrong, unparseable or hostile response is a result with a status."""


class PooledVerifier(Verifier):
    """A verifier whose checks run in worker processes: ``start`` makes ``_pool``, and
    ``stop`` closes it, off the event loop (joining workers blocks for up to seconds)."""

    _pool: TimeoutPool | None = None

    async def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.close)
