"""The plug-in interface every verifier implements.

A verifier owns a request item schema, a result schema, and either a synchronous ``check``
(one item's result: the core runs it in worker processes under the verifier's limits, with
the cache, fair share between callers and metrics; reward_server/pipeline.py) or an async
``verify`` that turns a batch of items into results in the same order (full control, for a
verifier with its own resources). The server core builds ``POST /v1/verify/<name>`` and the
``/v1/rewards`` dispatch from these attributes alone, so a new verifier never edits the core.
"""

from __future__ import annotations

import asyncio
import hashlib
from abc import ABC
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from reward_server.server_settings import ServerSettings

if TYPE_CHECKING:
    from reward_server.process_pool import TimeoutPool
    from reward_server.sandbox_service import SandboxService


class ItemBase(BaseModel):
    """Fields common to every item; verifiers subclass it."""

    model_config = ConfigDict(extra="forbid")
    _check_key: bytes | None = PrivateAttr(None)

    def check_key(self) -> bytes:
        """The result cache's key of a ``check`` verdict: the digest of the item's JSON (the
        verdict is a function of the item and the settings, which are the process's). Made
        once, where the item is admitted (``admission.admit``, ``keyed``: on a thread for a
        large body), as code items make theirs where they are validated: it costs what the
        item's values number (a million: 25 ms to 0.13 s), every caller's on the loop."""
        if self._check_key is None:
            self._check_key = hashlib.sha256(self.model_dump_json().encode()).digest()
        return self._check_key


class ResultBase(BaseModel):
    """Every result carries a score and a status.

    ``score`` is None when the item could not be scored for a reason outside the response
    (the sandbox is down): the trainer must not read that as a reward of 0.
    """

    score: float | None = Field(description="Reward in [0, 1]; null when unscorable.")
    status: str = Field(description="Verifier-specific status, e.g. 'ok' or 'timeout'.")
    # (image id, runtime) of each sandbox container that ran it (empty: none did): a warm
    # container outlives an image rebuilt under the same tag, and a cached result keeps
    # where it was computed; its response's block names these (provenance.Provenances.of)
    _ran_in: frozenset[tuple[str | None, str | None]] = PrivateAttr(frozenset())

    @property
    def ran_in(self) -> frozenset[tuple[str | None, str | None]]:
        return self._ran_in


class Verifier(ABC):
    """Subclass, set the three class attributes, implement ``check`` (or ``verify``), then
    register."""

    name: ClassVar[str]
    item_model: ClassVar[type[ItemBase]]
    result_model: ClassVar[type[ResultBase]]
    description: ClassVar[str] = ""
    # Its own settings, if any: a pydantic model whose fields the server composes under
    # ``settings_prefix`` (default: ``name``), so ``--<prefix>-<field>`` and
    # ``REWARD_SERVER_<PREFIX>_<FIELD>`` set them and ``--help`` lists them.
    settings_model: ClassVar[type[BaseModel] | None] = None
    settings_prefix: ClassVar[str | None] = None
    # What every result names as having produced it (reward_server/provenance.py): the
    # distributions its verdicts rest on, and those of its settings that only set how much
    # runs at once or where (workers, engines), left out of its settings digest
    libraries: ClassVar[tuple[str, ...]] = ()
    capacity_settings: ClassVar[frozenset[str]] = frozenset()
    # The verifier's own statuses whose score is null (statuses.score_for): only what the
    # completion cannot have caused, such as a dataset's broken tests found before it ran
    null_statuses: ClassVar[frozenset[str]] = frozenset()
    # For ``check``: one item's limits in its worker, and the workers (0: the server's
    # ``check_workers``). Past a limit the item scores 0 (``timeout``, ``memory_limit``).
    check_timeout_s: ClassVar[float] = 10.0
    check_memory_mb: ClassVar[int] = 1024
    check_workers: ClassVar[int] = 0

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings  # the server's (cache size, budgets, ...)
        self.config: BaseModel | None = None  # its own section, validated
        if self.settings_model is not None:
            self.config = settings.section(self.settings_prefix or self.name)

    async def start(self) -> None:
        """Acquire resources (process pools, Docker clients); called once at server start."""

    async def stop(self) -> None:
        """Release everything ``start`` acquired; called once at shutdown."""

    def use_sandbox(self, sandbox: SandboxService | None) -> None:
        """Called once before ``start``: the server's sandbox service (its containers and the
        fair gate in front of them; the app starts and stops it), or None where the server
        runs none. A verifier that runs in it keeps it."""

    def check(self, item: ItemBase) -> ResultBase:
        """One item's result, a pure function of the item and the settings. Runs in a worker
        process (an instance made there: what ``start`` made is not in it), so it may be slow
        or crash on a hostile response: the core scores that 0 with a status."""
        raise NotImplementedError

    async def verify(self, items: Sequence[ItemBase]) -> list[ResultBase]:
        """Score ``items``; one result per item, same order. Never raise for bad content:
        a wrong, unparseable or hostile response is a result with a status. A verifier
        that supplies ``check`` leaves this to the core."""
        raise NotImplementedError

    @classmethod
    def checks(cls) -> bool:
        """Whether the core runs this verifier's items through its ``check``."""
        return cls.check is not Verifier.check and cls.verify is Verifier.verify


class PooledVerifier(Verifier):
    """A verifier whose checks run in worker processes: ``start`` makes ``_pool``, and
    ``stop`` closes it, off the event loop (joining workers blocks for up to seconds)."""

    _pool: TimeoutPool | None = None

    async def stop(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.close)
