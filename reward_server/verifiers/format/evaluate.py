"""One item's rules checked in this process, and the item's score from its rules' verdicts.

A caller's ``regex`` is not searched here: ``check`` returns it as a pending search (the
verifier sends those to a worker) and a ``None`` in its rule's place."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from reward_server.verifiers.format import rules
from reward_server.verifiers.format.items import (
    FinalAnswerRule,
    FormatItem,
    FormatResult,
    RuleVerdict,
)
from reward_server.verifiers.format.patterns import Found, Search, search_many

_RULES: dict[str, Callable[[str], rules.Outcome]] = {
    "think": rules.think, "tag_count": rules.tag_count}
NO_REGION = "the reasoning never ends (no </think>): no final answer after it"


class Pending(NamedTuple):
    rule: int  # its index in the item's rules
    search: Search


def rule_name(rule: object) -> str:
    if isinstance(rule, FinalAnswerRule):
        return f"final_answer:{rule.form}"
    return rule.rule  # type: ignore[attr-defined]


def verdict(name: str, outcome: rules.Outcome) -> RuleVerdict:
    return RuleVerdict(rule=name, score=outcome.score, passed=outcome.score == 1.0,
                       reason=outcome.reason, match=outcome.match)


def check(item: FormatItem) -> tuple[list[RuleVerdict | None], list[Pending]]:
    """The item's verdicts, None where a regex search is pending (listed second)."""
    text = item.text
    verdicts: list[RuleVerdict | None] = []
    pending: list[Pending] = []
    for k, rule in enumerate(item.rules):
        name = rule_name(rule)
        if isinstance(rule, FinalAnswerRule):
            region = rules.answer_region(text, rule.after_think, rule.ignore_code)
            if region is None:
                outcome = rules.Outcome(0.0, NO_REGION)
            elif rule.regex is not None:
                pending.append(Pending(k, (rule.regex, rule.flags, region)))
                verdicts.append(None)
                continue
            else:
                outcome = rules.PATTERNS[rule.form](region)
        elif rule.rule == "think_answer":
            outcome = (rules.think_answer_strict if rule.strict else rules.think_answer_r1)(text)
        else:
            outcome = _RULES[rule.rule](text)
        verdicts.append(verdict(name, outcome))
    return verdicts, pending


def regex_verdict(name: str, search: Search, found: Found) -> RuleVerdict:
    if found is None:
        return verdict(name, rules.Outcome(0.0, "no match for the regex"))
    return verdict(name, rules.found(search[2], *found))


def combine(item: FormatItem, verdicts: Sequence[RuleVerdict]) -> FormatResult:
    """The item's result: null if any rule is; else the weighted mean (or all or nothing)."""
    statuses = {v.status for v in verdicts}
    for status in ("unavailable", "not_run"):
        if status in statuses:
            return FormatResult(score=None, status=status, rules=list(verdicts))  # type: ignore[arg-type]
    if item.all_or_nothing:
        score = float(all(v.passed for v in verdicts))
    else:
        weights = [rule.weight for rule in item.rules]
        score = sum(w * v.score for w, v in zip(weights, verdicts, strict=True)  # type: ignore[misc]
                    ) / sum(weights)
    return FormatResult(score=score, status="timeout" if "timeout" in statuses else "ok",
                        rules=list(verdicts))


def evaluate(item: FormatItem) -> FormatResult:
    """The item's result with its regexes searched here, unbounded: for trusted patterns
    (the bench's in-process baseline, tests), never for a caller's."""
    verdicts, pending = check(item)
    for (k, search), found in zip(pending, search_many([p.search for p in pending]), strict=True):
        verdicts[k] = regex_verdict(rule_name(item.rules[k]), search, found)
    return combine(item, verdicts)  # type: ignore[arg-type]
