"""What a re-score changed: verdicts by verifier, direction and status, what produced the old
and the new ones, and examples; as JSON and as a table to read.

The lines summarised are JSON from a file (a resumed output's first part was written by an
earlier run, perhaps an older version's), so each field is taken for what it is: a field of
another type than rescore writes counts as absent (a fingerprint as ``malformed``), never as
a reason to stop after all the scoring is done.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

EPSILON = 1e-9  # rewards are fractions of tests or of rules: equal when this close
DIRECTIONS = ("up", "down", "to_null", "from_null")
SHOWN_CHARS = 200  # of a response or a field, in an example


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def fingerprint(block: Any) -> str | None:
    """A provenance block's fingerprint; None where there is none, ``"malformed"`` for a
    block that is not an object or a fingerprint that is not a string."""
    if block is None or isinstance(block, dict) and block.get("fingerprint") is None:
        return None
    if not isinstance(block, dict) or not isinstance(block["fingerprint"], str):
        return "malformed"
    return block["fingerprint"]


def direction(old: float | None, new: float | None) -> str | None:
    """How a reward moved: ``up``/``down``, ``to_null`` (now unscorable), ``from_null``
    (scorable again), or None when it did not."""
    if old is None and new is None:
        return None
    if old is None:
        return "from_null"
    if new is None:
        return "to_null"
    if abs(new - old) <= EPSILON:
        return None
    return "up" if new > old else "down"


def _cut(value: Any) -> Any:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def _example(line: dict[str, Any]) -> dict[str, Any]:
    item, old = _object(line.get("item")), _object(line.get("previous"))
    result = _object(line.get("result"))
    return {"origin": _cut(line.get("origin")), "response": _cut(item.get("response", "")),
            "fields": {k: _cut(v) for k, v in item.items() if k not in ("response", "verifier")},
            "old": {"reward": _number(old.get("reward")),
                    "status": _object(old.get("result")).get("status")},
            "new": {"reward": _number(line.get("reward")), "status": result.get("status"),
                    "detail": _cut(result.get("detail") or "")}}


def provenance_changes(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """What differs between two blocks, one phrase per part (``code``, ``sympy 1.12 →
    1.14``); ``["not logged"]`` when the old block is missing."""
    if not old:
        return ["not logged"]
    if not new:
        return ["none now"]
    if not isinstance(old, dict) or not isinstance(new, dict):
        return ["malformed"]
    changes = []
    for key in ("version", "code", "settings", "sandbox_image", "sandbox_runtime"):
        if old.get(key) != new.get(key):
            changes.append(f"{key} {old.get(key)} → {new.get(key)}")
    before, after = _object(old.get("libraries")), _object(new.get("libraries"))
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            changes.append(f"{name} {before.get(name, 'absent')} → {after.get(name, 'absent')}")
    return changes


def summarize(lines: Iterable[dict[str, Any]], examples: int = 3) -> dict[str, Any]:
    """The summary of re-scored lines (``rescore``'s output): counts by verifier, direction
    and status transition, the provenance before and after, ``examples`` per direction."""
    total: Counter[str] = Counter()
    verifiers: dict[str, Counter[str]] = defaultdict(Counter)
    statuses: dict[str, Counter[str]] = defaultdict(Counter)
    shown: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    before: dict[str, dict[str, dict[str, Any] | None]] = defaultdict(dict)
    after: dict[str, dict[str, Any] | None] = {}
    for line in lines:
        name = str(_object(line.get("item")).get("verifier"))
        old = _object(line.get("previous"))
        moved = direction(_number(old.get("reward")), _number(line.get("reward")))
        counts = verifiers[name]
        counts["items"] += 1
        total["items"] += 1
        old_block, new_block = old.get("provenance"), line.get("provenance")
        before[name][fingerprint(old_block) or "not logged"] = old_block
        after[name] = new_block or after.get(name)
        old_status = _object(old.get("result")).get("status")
        new_status = _object(line.get("result")).get("status")
        if old_status is not None and old_status != new_status:
            counts["status_changed"] += 1
        if moved is None:
            continue
        counts["changed"] += 1
        counts[moved] += 1
        total["changed"] += 1
        total[moved] += 1
        statuses[name][f"{old_status} → {new_status}"] += 1
        if len(shown[name][moved]) < examples:
            shown[name][moved].append(_example(line))
    return {
        "items": total["items"], "changed": total["changed"],
        "directions": {d: total[d] for d in DIRECTIONS},
        "by_verifier": {name: {"items": c["items"], "changed": c["changed"],
                               **{d: c[d] for d in DIRECTIONS},
                               "status_changed": c["status_changed"]}
                        for name, c in sorted(verifiers.items())},
        "status_transitions": {name: dict(c.most_common()) for name, c in sorted(statuses.items())},
        "provenance": {name: {
            "before": sorted(before[name]), "after": fingerprint(after.get(name)),
            "changes": sorted({c for old in before[name].values()
                               for c in provenance_changes(old, after.get(name))})}
            for name in sorted(verifiers)},
        "examples": {name: dict(by) for name, by in sorted(shown.items())},
    }


def table(summary: dict[str, Any]) -> str:
    """The summary as text: a row per verifier, then what changed under it."""
    head = ("verifier", "items", "changed", *DIRECTIONS, "status_changed")
    rows = [head] + [(name, *(str(c[k]) for k in head[1:]))
                     for name, c in summary["by_verifier"].items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
           for r in rows]
    out.append(f"{summary['changed']} of {summary['items']} verdicts changed")
    for name, moves in summary["status_transitions"].items():
        for move, n in moves.items():
            out.append(f"  {name}: {move}  {n}")
    for name, p in summary["provenance"].items():
        what = "; ".join(p["changes"]) or "nothing (same fingerprint)"
        out.append(f"  {name} provenance: {what}")
    for name, by in summary["examples"].items():
        for moved, cases in by.items():
            for case in cases:
                out.append(f"  e.g. {name} {moved} {case['old']['reward']} → "
                           f"{case['new']['reward']} ({case['origin']}): "
                           f"{case['response'][:80]!r}")
    return "\n".join(out)
