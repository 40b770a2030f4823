"""OpenEnv clients for the server's environments: ``EnvClient`` subclasses, so they hold one
WebSocket per episode, reconnect, time out and close as OpenEnv's own clients do. A token goes
in ``headers``, as OpenEnv passes one to a private Space::

    from reward_server.environments.client import CodeInterpreterEnv
    from reward_server.environments.models import CodeAction

    with CodeInterpreterEnv(base_url="http://reward:8000/v1/environments/code",
                            headers={"Authorization": f"Bearer {token}"}).sync() as env:
        env.reset()
        result = env.step(CodeAction(code="x = 6 * 7\\nx"))
        result.observation.display  # [{'text/plain': '42'}]

Any OpenEnv client works as well (``GenericEnvClient`` with dict actions): these add only the
typed models."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.types import Action, Observation, State

from reward_server.environments.models import (
    CodeAction,
    CodeObservation,
    CodeState,
    VerifierAction,
    VerifierObservation,
    VerifierState,
)

ActT = TypeVar("ActT", bound=Action)
ObsT = TypeVar("ObsT", bound=Observation)
StateT = TypeVar("StateT", bound=State)


class _TypedEnv(EnvClient[ActT, ObsT, StateT]):
    """An ``EnvClient`` whose wire format is the models': an action's fields out, an
    observation's fields (with ``reward`` and ``done``, which OpenEnv's format carries beside
    them) and a state's in."""

    observation_model: ClassVar[type[Observation]]
    state_model: ClassVar[type[State]]

    def _step_payload(self, action: ActT) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[ObsT]:
        observation = self.observation_model.model_validate(
            {**payload.get("observation", {}), "reward": payload.get("reward"),
             "done": payload.get("done", False)})
        return StepResult(observation, observation.reward, observation.done,  # type: ignore[arg-type]
                          payload.get("metadata"))

    def _parse_state(self, payload: dict[str, Any]) -> StateT:
        return self.state_model.model_validate(payload)  # type: ignore[return-value]


class CodeInterpreterEnv(_TypedEnv[CodeAction, CodeObservation, CodeState]):
    """``/v1/environments/code``: ``reset(files=..., memory_limit_MB=..., idle_ttl_s=...)``
    opens an interpreter, ``step(CodeAction(code=...))`` runs a cell in it."""

    observation_model = CodeObservation
    state_model = CodeState


class VerifierEnv(_TypedEnv[VerifierAction, VerifierObservation, VerifierState]):
    """``/v1/environments/verifier``: ``reset(verifier="math", item={"answer": "42"})`` sets
    the item, ``step(VerifierAction(response=...))`` scores the answer: ``reward`` is the
    verifier's score (None when it could not be scored), ``observation.status`` its status."""

    observation_model = VerifierObservation
    state_model = VerifierState
