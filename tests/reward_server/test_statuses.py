"""The statuses every verifier shares mean one thing wherever they appear: the server's
module, the harness's own spelling (it cannot import the server), and each built-in
verifier's result schema."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from typing import get_args

import pytest

from reward_server import statuses
from reward_server.verifiers.registry import ENTRY_POINT_GROUP
from sandbox.harness import statuses as harness

VERIFIERS = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def test_the_harness_spells_the_shared_names_alike() -> None:
    assert harness.NOT_RUN == statuses.NOT_RUN
    assert harness.SANDBOX_UNAVAILABLE == statuses.SANDBOX_UNAVAILABLE
    assert harness.UNSCORABLE - {harness.BAD_TESTS} <= statuses.NULL_STATUSES


@pytest.mark.parametrize("name", sorted(VERIFIERS))
def test_every_verifier_with_workers_reports_the_shared_statuses(name: str) -> None:
    """A trainer reads "the budget left it unrun" and "could not run it" the same from every
    verifier. One that can say ``timeout`` runs its work under a time limit, in workers a
    request's budget can leave it waiting for; one with neither (a pure function of the
    text) needs none of them."""
    model = VERIFIERS[name].load().result_model
    spelled = set(get_args(model.model_fields["status"].annotation))
    if "timeout" not in spelled and not spelled & statuses.NULL_STATUSES:
        return
    assert statuses.NOT_RUN in spelled
    assert len(spelled & statuses.UNAVAILABLE_STATUSES) == 1, spelled


def test_unavailable_in_either_spelling_is_one_test() -> None:
    assert statuses.is_unavailable("unavailable") and statuses.is_unavailable(
        "sandbox_unavailable")
    assert not statuses.is_unavailable("timeout")
    assert statuses.UNAVAILABLE_STATUSES <= statuses.NULL_STATUSES
    assert statuses.RESPONSE_TOO_LONG not in statuses.NULL_STATUSES  # the completion's doing


def test_the_client_reads_them_without_the_server_installed() -> None:
    code = ("import sys, reward_server.client; "
            "print(sorted(m for m in ('sandbox', 'docker', 'fastapi') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(("status", "score", "own", "expected"), [
    ("ok", 1.0, frozenset(), 1.0),
    ("ok", None, frozenset(), 0.0),  # a verifier that forgot a score: never a null
    ("ok", float("nan"), frozenset(), 0.0),  # JSON would write it as null
    ("timeout", 0.0, frozenset(), 0.0),
    ("response_too_long", None, frozenset(), 0.0),  # the completion's doing
    ("not_run", 0.0, frozenset(), None),  # whatever was computed
    ("unavailable", 1.0, frozenset(), None),
    ("sandbox_unavailable", None, frozenset(), None),
    ("invalid_item", 0.0, frozenset(), None),
    ("bad_entry", 0.0, frozenset({"bad_entry"}), None),  # a verifier's own null status
    ("bad_entry", 0.0, frozenset(), 0.0),  # another verifier's word is not null here
])
def test_score_for_is_the_one_null_rule(status: str, score: float | None, own: frozenset[str],
                                        expected: float | None) -> None:
    assert statuses.score_for(status, score, own) == expected


def test_the_core_applies_the_rule_to_every_verifiers_results() -> None:
    """``pipeline.finish``: what any verifier returns leaves the core under the rule."""
    import time

    from reward_server.pipeline import finish
    from tests.helpers.hostile_plugin import HostileResult, HostileVerifier

    verifier = HostileVerifier.__new__(HostileVerifier)
    results = [HostileResult.model_construct(score=None, status="ok"),
               HostileResult.model_construct(score=0.5, status="not_run"),
               HostileResult(score=1.0, status="ok")]
    assert [r.score for r in finish(verifier, results, time.perf_counter())] == [0.0, None, 1.0]
