"""What the server's environments share: they run on the server's event loop only."""

from __future__ import annotations

from typing import Any, TypeVar

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

ActT = TypeVar("ActT", bound=Action)
ObsT = TypeVar("ObsT", bound=Observation)
StateT = TypeVar("StateT", bound=State)


class LoopEnvironment(Environment[ActT, ObsT, StateT]):
    """An environment whose ``reset_async``/``step_async`` await the server's own services
    (sessions, the scorer) on its event loop. OpenEnv prefers those when a subclass overrides
    them, so the synchronous pair, which OpenEnv would run on a thread of its own where
    nothing of the loop's may be awaited, is never called. A subclass's ``reset_async``
    takes ``self`` positionally only: a reset's fields are a caller's keywords, and one
    named ``self`` is then an unknown field, not Python's TypeError."""

    # each instance holds only its own episode: nothing shared between connections
    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> ObsT:
        raise NotImplementedError("reset_async runs on the server's loop")

    def step(self, action: ActT, timeout_s: float | None = None, **kwargs: Any) -> ObsT:
        raise NotImplementedError("step_async runs on the server's loop")

    async def close_async(self) -> None:
        """The episode's end, awaited on the loop when its connection closes (``episode``);
        ``close`` is OpenEnv's, for its HTTP endpoints' environment of one call."""
        self.close()
