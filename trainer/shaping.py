"""Reward terms the trainer computes itself, from what only it knows: a completion's tokens.

DAPO's soft overlong punishment (Yu et al. 2025, arXiv 2503.14476, §3.4, eq. 13): a completion
that runs into the last ``L_cache`` tokens before ``L_max`` loses reward linearly, down to −1
at ``L_max``, so that a long answer is discouraged smoothly instead of being cut and scored as
if it were wrong. veRL's DAPO reward manager computes the same term as
``min(-(|y| - (L_max - L_cache)) / L_cache * penalty_factor, 0)`` with ``L_max`` its response
limit (``verl/workers/reward_manager/dapo.py``); the −1 branch past ``L_max`` is reached here
only when ``overlong_buffer.max_length`` is below ``max_completion_length``.
"""

from __future__ import annotations

from collections.abc import Iterable


def overlong_penalty(length: int, max_length: int, buffer_len: int) -> float:
    """R_length(y) of DAPO eq. 13 for |y| = ``length``, L_max = ``max_length``, L_cache =
    ``buffer_len``: 0 up to L_max − L_cache, then linear to −1 at L_max, −1 beyond."""
    if not 0 < buffer_len <= max_length:
        raise ValueError(f"need 0 < L_cache <= L_max, got L_cache={buffer_len}, "
                         f"L_max={max_length}")
    expected = max_length - buffer_len
    if length <= expected:
        return 0.0
    if length <= max_length:
        return (expected - length) / buffer_len
    return -1.0


def overlong_penalties(lengths: Iterable[int], max_length: int, buffer_len: int
                       ) -> list[float]:
    return [overlong_penalty(int(n), max_length, buffer_len) for n in lengths]
