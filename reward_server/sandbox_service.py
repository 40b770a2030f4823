"""The sandbox service: one ``Sandbox`` (its Docker engines, warm containers and runner), its
settings, and the fair gate in front of its containers. The app's lifespan makes it, starts it
before the verifiers and stops it after them, and hands it to whoever runs in it: the code
verifier's items, ``/run_code``'s snippets, the sessions' cells, reasoning_gym's scoring
chunks. They share the containers by time, caller by caller, through its one gate.

There is one when the sandbox's settings section is loaded (``sandbox_settings``, which the
code verifier declares): a server without it runs no sandbox, and ``/run_code``, sessions and
reasoning_gym say so. A missing engine or image does not stop the server: the pool keeps
trying, and what needs a container meanwhile is told the sandbox is unavailable."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

from reward_server import metrics
from reward_server.fair_queue import FairGate, Held
from reward_server.sandbox_settings import SECTION, SandboxSection
from sandbox.config import SandboxConfig
from sandbox.runner import Sandbox

if TYPE_CHECKING:
    from reward_server.server_settings import ServerSettings

SPARE_CONTAINERS = 1  # per engine, beyond pool_size (see SandboxService)
GATE = "code"  # the gate's name in metrics and messages, as when it was the code verifier's
# The work of one caller's turn on a container before it lets a waiting one in (a code item
# between two of its tests, a reasoning_gym chunk between two answers): another request
# waits about this plus one test's limit, not an item's whole budget (60 s). Honest work
# finishes inside it; a turn costs one harness round trip (milliseconds), and with none
# waiting the next turn runs in the same container (build and checker kept).
TURN_S = 1.0


class SandboxService:
    def __init__(self, settings: SandboxSection, request_budget_s: float) -> None:
        self.settings = settings  # the section, the sessions' settings with it
        self.request_budget_s = request_budget_s
        config = settings.config()
        # One warm container per engine more than items run at once: a container worn out
        # (max_uses, gVisor's headroom) is replaced in the background, and the next item
        # takes the spare meanwhile. Whose turn it is: the gate. A container a program
        # spoiled is replaced in its caller's slot instead (the gate's upkeep, pool.py), so
        # the seconds it takes are that caller's share, not its neighbours'.
        self.config_pool_size = config.pool_size  # the setting: items at once per engine
        self.sandbox = Sandbox(replace(config, pool_size=config.pool_size + SPARE_CONTAINERS),
                               on_engine_state=self._engine_states_changed)
        slots = config.pool_size * len(self.sandbox.pool.pools)
        self.gate = FairGate(slots, GATE, upkeep=self.sandbox.pool.upkeep)
        self._unsplit = FairGate(max(1, slots - 1), f"{GATE}-unsplit")

    @classmethod
    def of(cls, settings: ServerSettings) -> SandboxService | None:
        """The server's, or None when its settings have no sandbox section."""
        if SECTION not in settings.sections:
            return None
        section = settings.section(SECTION)
        assert isinstance(section, SandboxSection)
        return cls(section, settings.request_budget_s)

    def _engine_states_changed(self) -> None:
        states = self.sandbox.pool.engine_states
        for state, count in states.items():
            metrics.SANDBOX_ENGINES.labels(state).set(count)
        # the gate lets in as many items as the serving engines have containers: with a
        # slot for an engine that is gone (or wedged, its warm containers spent at any
        # moment), an item holds a slot waiting for a container while another caller's
        # minute-long snippets hold the rest, up to acquire_timeout_s
        slots = self.config_pool_size * max(1, states["serves"])
        self.gate.resize(slots)
        self._unsplit.resize(slots - 1)

    @property
    def config(self) -> SandboxConfig:
        return self.sandbox.config

    @property
    def image_ids(self) -> list[str]:
        """The ids of the image its containers run (none before an engine connected)."""
        return self.sandbox.pool.image_ids

    @property
    def runtimes(self) -> list[str]:
        """The OCI runtimes its containers run under: the runtime setting, or unset the
        engine's default (none known before an engine connected)."""
        return self.sandbox.pool.runtimes

    async def start(self) -> None:
        """Never raises: without an engine or the image the pool is unavailable, saying why,
        and keeps trying."""
        await self.sandbox.start()

    async def stop(self) -> None:
        await self.sandbox.stop()

    @asynccontextmanager
    async def unsplit_slot(self, budgeted: bool = True) -> AsyncIterator[Held]:
        """One of the gate's slots for work that cannot end its turn early (a /run_code
        snippet, a session cell: up to a minute each; a session's container started or
        removed), which holds at most all of the gate's slots but one at once: items, which
        take turns, always find one, whoever holds the rest with minute-long cells. With one
        slot there is none to keep. ``budgeted`` False: work that must be done whatever the
        wait (a container's removal), never cut by the request's budget."""
        async with self._unsplit.slot(budgeted), self.gate.slot(budgeted) as held:
            yield held

    @property
    def unsplit_hold_s(self) -> float | None:
        """The longest a snippet or a cell may hold a slot. With one slot it holds the only
        one: half the request budget, so an item waiting behind it still runs within its
        budget (a minute-long cell made another caller's item ``not_run``). None: no budget,
        or ``unsplit_slot`` keeps a slot for items."""
        budget = self.request_budget_s
        return budget / 2 if budget and self.gate.slots == 1 else None
