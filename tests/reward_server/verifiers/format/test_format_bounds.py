"""What the format verifier does in the server process is bounded by its cost estimate:
admitting an item compiles nothing (a caller's pattern is a worker's), and the built-in
rules take at most ``NS_PER_UNIT`` of this thread's CPU a unit of ``cost`` on the texts
that cost them most, so a request the verifier checks on the event loop (``INLINE_COST``)
takes milliseconds, and a slice on its thread (``SLICE_COST``) a fraction of a second.
CPU time, not wall clock: the machine's load must not decide a test."""

from __future__ import annotations

import time

import pytest

from reward_server.verifiers.format.evaluate import check
from reward_server.verifiers.format.items import FormatItem
from reward_server.verifiers.format.verifier import INLINE_COST, SLICE_COST, cost
from reward_server.worst_case import crafted_classes, format_cases

NS_PER_UNIT = 400  # measured worst ~160 (runs of fences, cut out once per answer region)
SHAPES = {"fences": "```\n", "think tags": "<think>\n", "boxes": "\\boxed{{",
          "answer lines": "Answer: x\n", "tags": "\n</think>\n<answer>\n", "angles": "<",
          "newlines": "\n", "tildes": "~~~\n"}


def test_admitting_sixteen_crafted_classes_compiles_nothing() -> None:
    """Each class costs ``re`` seconds to compile; admission held the event loop for all 16
    (56-65 s). Now it checks their length, and the worker compiles them."""
    raw = {"response": "<think>a</think> 42", "rules": [
        {"rule": "final_answer", "regex": p} for p in crafted_classes(16)]}
    started = time.thread_time()
    FormatItem.model_validate(raw)
    assert time.thread_time() - started < 0.05


def _cpu_seconds(item: FormatItem) -> float:
    started = time.thread_time()
    check(item)
    return time.thread_time() - started


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_built_in_rules_cost_at_most_their_estimate(shape: str) -> None:
    rules = format_cases(1024)["format: 16 rules over fences"]["rules"]
    for size in (1, 16 * 1024, 256 * 1024):
        item = FormatItem(response=(SHAPES[shape] * size)[:size], rules=rules)
        spent = min(_cpu_seconds(item) for _ in range(3))  # the check is deterministic:
        # its least CPU time is its cost; the rest is a loaded machine's cache misses
        assert spent <= NS_PER_UNIT * 1e-9 * cost(item) + 0.001, (size, spent)
    assert NS_PER_UNIT * 1e-9 * INLINE_COST <= 0.03  # the worst request on the event loop
    assert NS_PER_UNIT * 1e-9 * SLICE_COST <= 0.5  # the longest a thread hand-off holds it
