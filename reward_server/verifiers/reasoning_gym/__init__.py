"""The ``reasoning_gym`` verifier (docs/reasoning_gym.md): any task of the reasoning-gym
library, scored by its own ``score_answer`` in guarded worker processes."""

from reward_server.verifiers.reasoning_gym.verifier import (
    ReasoningGymItem,
    ReasoningGymResult,
    ReasoningGymVerifier,
)

__all__ = ["ReasoningGymItem", "ReasoningGymResult", "ReasoningGymVerifier"]
