"""The statuses every verifier shares, and what each means for the reward: one home for the
words a trainer, a dashboard or the client reads the same whatever the verifier (a verifier's
own statuses, such as math's ``no_answer``, stay in its module).

Null means the completion could not have caused it; anything the completion caused scores 0:
- ``not_run`` (null): its request's budget ran out while the item waited for a worker or a
  container (reward_server/slow_lane.py); ``timeout`` only ever means it ran out of time (0).
- ``unavailable`` (null): the verifier could not run it at all (its workers were killed from
  outside again and again, its optional library is not installed). The code verifier spells it
  ``sandbox_unavailable`` (no container could be had), the name its users already match on;
  ``UNAVAILABLE_STATUSES`` is the one test for either.
- ``invalid_item`` (null): the row is at fault, not the completion (reward_server/admission.py);
  ``response_too_long`` (0): the completion is over the size limit.

The sandbox's harness spells ``not_run`` and ``sandbox_unavailable`` in its own statuses
module, since it runs stdlib-only in the image and cannot import this one; a test checks the
two agree. This module imports nothing, so the light client can read it too."""

from __future__ import annotations

from typing import Final

NOT_RUN: Final = "not_run"
UNAVAILABLE: Final = "unavailable"
SANDBOX_UNAVAILABLE: Final = "sandbox_unavailable"
INVALID_ITEM: Final = "invalid_item"
RESPONSE_TOO_LONG: Final = "response_too_long"

UNAVAILABLE_STATUSES: frozenset[str] = frozenset({UNAVAILABLE, SANDBOX_UNAVAILABLE})
# the server's answers about an item rather than the verifier's: a result with a detail
REFUSALS: tuple[str, ...] = (INVALID_ITEM, RESPONSE_TOO_LONG)
# null whichever verifier answered: nothing the completion did caused these
NULL_STATUSES: frozenset[str] = frozenset({NOT_RUN, INVALID_ITEM}) | UNAVAILABLE_STATUSES


def is_unavailable(status: str) -> bool:
    """Whether the verifier could not run the item at all (any verifier's spelling)."""
    return status in UNAVAILABLE_STATUSES


def score_for(status: str, score: float | None,
              own_null: frozenset[str] = frozenset()) -> float | None:
    """The reward a result with ``status`` carries, whichever verifier made it: null for a
    null status (``NULL_STATUSES``, or one the verifier declares, ``own_null``: a broken
    dataset test found before the candidate ran), whatever score was computed; otherwise its
    score, and 0 where it has none (None, or NaN, which JSON writes as null). What the
    completion caused is never null, or a wrong answer could buy itself a zero advantage
    instead of a negative one."""
    if status in NULL_STATUSES or status in own_null:
        return None
    return 0.0 if score is None or score != score else score
