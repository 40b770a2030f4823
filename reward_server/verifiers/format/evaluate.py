"""One item's rules checked in this process, and the item's score from its rules' verdicts.

A caller's ``regex`` is not compiled or searched here: ``check`` returns it as a pending
search (the verifier sends those to a worker) and a ``None`` in its rule's place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from reward_server.verifiers.format import rules
from reward_server.verifiers.format.items import FormatItem, FormatResult, RuleVerdict
from reward_server.verifiers.format.patterns import Found, Search, compile_many, search_many


class Pending(NamedTuple):
    rule: int  # its index in the item's rules
    search: Search


def verdict(name: str, outcome: rules.Outcome) -> RuleVerdict:
    # our own values, of the model's types: built without validation (a third of a rule's
    # cost in a batch of 256)
    return RuleVerdict.model_construct(rule=name, score=outcome.score,
                                       passed=outcome.score == 1.0, status="ok",
                                       reason=outcome.reason, match=outcome.match)


def check(item: FormatItem) -> tuple[list[RuleVerdict | None], list[Pending]]:
    """The item's verdicts, None where a regex search is pending (listed second)."""
    text = item.text
    verdicts: list[RuleVerdict | None] = []
    pending: list[Pending] = []
    for k, rule in enumerate(item.rules):
        outcome = rule.check(text)
        if type(outcome) is Search:
            pending.append(Pending(k, outcome))
            verdicts.append(None)
        else:
            verdicts.append(verdict(rule.name, outcome))  # type: ignore[arg-type]
    return verdicts, pending


def regex_verdict(name: str, search: Search, found: Found) -> RuleVerdict:
    if found is None:
        return verdict(name, rules.Outcome(0.0, "no match for the regex"))
    return verdict(name, rules.found(search.text, *found))


def invalid(name: str, index: int, detail: str) -> RuleVerdict:
    """A regex the worker could not compile: the item's fault (null), the field named."""
    return RuleVerdict(rule=name, score=None, passed=None, status="invalid_item",
                       reason=f"rules[{index}].regex: {detail}")


def combine(item: FormatItem, verdicts: Sequence[RuleVerdict]) -> FormatResult:
    """The item's result: null if any rule is; else the weighted mean (or all or nothing)."""
    statuses = {v.status for v in verdicts}
    status = next((s for s in ("invalid_item", "unavailable", "not_run", "timeout")
                   if s in statuses), "ok")
    if status in ("invalid_item", "unavailable", "not_run"):
        score = None
    elif item.all_or_nothing:
        score = float(all(v.passed for v in verdicts))
    else:
        weights = [rule.weight for rule in item.rules]
        score = sum(w * v.score for w, v in zip(weights, verdicts, strict=True)  # type: ignore[misc]
                    ) / sum(weights)
    detail = next((v.reason for v in verdicts if v.status == "invalid_item"), None)
    return FormatResult.model_construct(score=score, status=status, rules=list(verdicts),
                                        detail=detail)


def evaluate(item: FormatItem) -> FormatResult:
    """The item's result with its regexes searched here, unbounded: for trusted patterns
    (the bench's in-process baseline, tests), never for a caller's."""
    verdicts, pending = check(item)
    problems = compile_many([(p.search.pattern, p.search.flags) for p in pending])
    for (k, search), problem in zip(pending, problems, strict=True):
        verdicts[k] = invalid(item.rules[k].name, k, problem) if problem else regex_verdict(
            item.rules[k].name, search, search_many([search])[0])
    return combine(item, verdicts)  # type: ignore[arg-type]
