"""The ifeval verifier's cost estimate bounds its CPU time: every rule, on the texts that
cost it most, takes at most ``US_PER_UNIT`` of this thread's CPU a unit of ``cost``. So the
verifier's thresholds are bounds: a request it checks on the event loop (``INLINE_COST``)
takes milliseconds, an item on its thread (``ITEM_COST``) under a second, and the rest go
to a worker under its time limit. CPU time, not wall clock: the machine's load must not
decide a test."""

from __future__ import annotations

import time

import pytest

from reward_server.verifiers.ifeval import (
    INLINE_COST,
    ITEM_COST,
    IfEvalItem,
    checks,
    cost,
    language,
)
from reward_server.verifiers.ifeval.evaluate import evaluate
from reward_server.verifiers.ifeval.labelled_cases import CASES
from reward_server.worst_case import ifeval_instructions, ifeval_response

US_PER_UNIT = 3.0  # measured worst ~1.8 (langdetect on a short text, the tokenizers)
HOSTILE = {  # each rule's slow path: runs its scans restart on, tokens, abbreviations
    "brackets": "[", "newlines": "\n", "angles": "<<", "stars": "*a\n- ",
    "periods": "a. ", "capitals": "DON'T ", "initials": "Mr. A. B. THE QUICK. brown FOX? ",
}
_CACHES = (checks._language, checks._sentences, checks._bullets, checks._capitals,
           checks._phrase, checks._whole_word, checks._splitter)


def _cpu_s(item: IfEvalItem) -> float:
    for cache in _CACHES:  # what the item would cost the first time
        cache.cache_clear()
    started = time.thread_time()
    evaluate(item.response, item.specs, item.strict)
    return time.thread_time() - started


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_every_rule_costs_at_most_its_estimate(shape: str) -> None:
    language.warm_up()  # its profiles load at the server's start
    text = HOSTILE[shape] * (8192 // len(HOSTILE[shape]))
    for instruction_id, kwargs in {case[0]: case[1] for case in CASES}.items():
        item = IfEvalItem(response=text, instructions=[
            {"instruction_id": instruction_id, "kwargs": kwargs}])
        spent = _cpu_s(item)
        assert spent <= US_PER_UNIT * 1e-6 * cost(item) + 0.002, (instruction_id, spent)


@pytest.mark.parametrize("strict", [True, False])
def test_the_most_an_item_may_ask_is_never_checked_on_the_event_loop(strict: bool) -> None:
    """The finding: 2,000 instructions on 8 KB held the event loop for a minute. The cap
    leaves 32; on 8 KB they are a worker's, and what the loop may take is milliseconds."""
    language.warm_up()
    item = IfEvalItem(response=ifeval_response(8192), strict=strict,
                      instructions=ifeval_instructions(32))
    assert cost(item) > ITEM_COST
    assert _cpu_s(item) <= US_PER_UNIT * 1e-6 * cost(item) + 0.002
    assert US_PER_UNIT * 1e-6 * INLINE_COST <= 0.03  # the worst request on the loop
