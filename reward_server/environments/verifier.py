"""The verifier environment: ``reset(verifier=..., item={...})`` sets an item (every field of
the verifier's item but ``response``), ``step(VerifierAction(response=...))`` submits the
answer, and the observation's ``reward`` is the verifier's score, its ``status`` the
verifier's status. One answer per episode (``done``), as a reward is one per completion.

Scoring goes through the server's ``Scorer`` as ``POST /v1/verify/<name>`` does: the same
admission (sizes, the item's schema under the server's settings; checked at reset too), the
caller's quotas and fair share, the cache, the verifier's limits and the slow lane. An item
that could not be scored for a reason outside the response (the sandbox unavailable) has a
null ``reward``, never a made-up 0."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from reward_server.admission import admit_all
from reward_server.environments.base import LoopEnvironment
from reward_server.environments.gate import current_caller
from reward_server.environments.messages import InvalidFields
from reward_server.environments.models import VerifierAction, VerifierObservation, VerifierState
from reward_server.errors import ApiError, InvalidItems, PayloadTooLarge
from reward_server.provenance import Provenances
from reward_server.scoring import Scorer

RESPONSE = "response"  # the item field the action fills


class VerifierEnvironment(LoopEnvironment[VerifierAction, VerifierObservation, VerifierState]):
    """One item at a time, scored by its verifier (see the module docstring)."""

    def __init__(self, scorer: Callable[[], Scorer],
                 provenance: Callable[[], Provenances]) -> None:
        super().__init__()
        # the app's, found when the episode starts (its lifespan makes them)
        self._scorer, self._provenance = scorer, provenance
        self._item: dict[str, Any] | None = None
        self._state = VerifierState()

    @property
    def state(self) -> VerifierState:
        return self._state

    async def reset_async(self, /, seed: int | None = None, episode_id: str | None = None,
                          verifier: Any = None, item: Any = None, **kwargs: Any
                          ) -> VerifierObservation:
        """The item to score next, admitted now as ``/v1/verify`` admits it (the server's
        field-size limit: a 413; the verifier's schema under the server's settings: a 422
        naming the field), with a stand-in response, on a worker thread (a reset's item may
        hold a million values)."""
        if kwargs:
            raise InvalidFields(f"reset.{next(iter(kwargs))}: unknown field; reset takes "
                                "verifier and item")
        if not isinstance(verifier, str):
            raise InvalidFields("reset.verifier: the name of a verifier is required (GET "
                                "/v1/verifiers lists them)")
        scorer = self._scorer()
        model = scorer.get(verifier).item_model  # 404 naming the known ones
        if item is None:
            item = {}
        if not isinstance(item, dict):
            raise InvalidFields("reset.item: an object of the verifier's item fields but "
                                f"{RESPONSE}")
        if RESPONSE in item:
            raise InvalidFields(f"reset.item.{RESPONSE}: the response is the step's action, "
                                "not part of the item")
        if RESPONSE not in model.model_fields:
            raise InvalidFields(f"reset.verifier: {verifier}'s items have no {RESPONSE} field "
                                "for an answer to fill")
        try:
            await asyncio.to_thread(admit_all, model, [{**item, RESPONSE: ""}],
                                    scorer.settings, verifier, "error")
        except (InvalidItems, PayloadTooLarge) as exc:
            raise _renamed(exc) from None
        self._item = item
        self._state = VerifierState(episode_id=episode_id or uuid.uuid4().hex,
                                    verifier=verifier)
        return VerifierObservation(verifier=verifier)

    async def step_async(self, action: VerifierAction, timeout_s: float | None = None,
                         **kwargs: Any) -> VerifierObservation:
        name = self._state.verifier
        if self._item is None or name is None:
            raise InvalidItems("action: no item to score: reset(verifier=..., item=...) first. "
                               "Over HTTP each /reset and /step is an environment of its own; "
                               "an episode is one WebSocket connection (OpenEnv's EnvClient)")
        if self._state.scored:
            raise InvalidItems("action: this episode's answer is scored; reset() for the next")
        raw = {**self._item, RESPONSE: action.response}
        try:
            [result] = await self._scorer().verify(name, [raw], current_caller(), "error")
        except (InvalidItems, PayloadTooLarge) as exc:
            raise _renamed(exc) from None
        self._state.scored, self._state.step_count = True, self._state.step_count + 1
        provenance = self._provenance().of_verifier(name, [result])
        provenance = None if provenance is None else provenance.model_dump(mode="json")
        return VerifierObservation(verifier=name, status=result.status, reward=result.score,
                                   result=result.model_dump(mode="json"),
                                   provenance=provenance, done=True)


def _renamed(exc: ApiError) -> ApiError:
    """The batch's field paths (``items[0].answer``) as this environment's fields; the
    item's schema refusals as field refusals (a ``VALIDATION_ERROR`` frame)."""
    message = (exc.message.replace(f"items[0].{RESPONSE}", f"action.{RESPONSE}")
               .replace("items[0].", "reset.item.").replace("items[0]", "reset.item"))
    kind = InvalidFields if isinstance(exc, InvalidItems) else type(exc)
    return kind(message, exc.headers)
