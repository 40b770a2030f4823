"""What a re-score counts as changed, and how it says what produced the old and new verdicts."""

from __future__ import annotations

import pytest

from reward_server.rescore.summary import direction, provenance_changes, summarize


@pytest.mark.parametrize(("old", "new", "moved"), [
    (0.0, 1.0, "up"), (1.0, 0.5, "down"), (1.0, None, "to_null"), (None, 0.0, "from_null"),
    (0.5, 0.5 + 1e-12, None), (None, None, None), (0.0, 0.0, None),
])
def test_direction(old: float | None, new: float | None, moved: str | None) -> None:
    assert direction(old, new) == moved


BLOCK = {"verifier": "math", "version": "0.1.0", "code": "a", "settings": "s",
         "libraries": {"python": "3.11.7", "sympy": "1.12"}, "sandbox_image": None,
         "fingerprint": "f1"}


def test_provenance_changes_name_each_part() -> None:
    newer = {**BLOCK, "code": "b", "libraries": {"python": "3.11.7", "sympy": "1.14",
                                                 "math-verify": "0.9.0"}, "fingerprint": "f2"}
    assert provenance_changes(BLOCK, newer) == [
        "code a → b", "math-verify absent → 0.9.0", "sympy 1.12 → 1.14"]
    assert provenance_changes(BLOCK, BLOCK) == []
    assert provenance_changes(None, BLOCK) == ["not logged"]


def _line(old: float | None, new: float | None, old_status: str, new_status: str,
          verifier: str = "math") -> dict:
    return {"origin": "x:1", "item": {"verifier": verifier, "response": "r", "answer": "1"},
            "reward": new, "result": {"status": new_status}, "provenance": BLOCK,
            "previous": {"reward": old, "result": {"status": old_status},
                         "provenance": BLOCK}}


def test_summary_counts_by_verifier_direction_and_status() -> None:
    lines = [_line(0.0, 1.0, "ok", "ok"), _line(1.0, 0.0, "ok", "timeout"),
             _line(0.0, 0.0, "no_answer", "parse_error"), _line(1.0, None, "passed",
                                                                "sandbox_unavailable", "code")]
    summary = summarize(lines, examples=1)
    assert summary["items"] == 4 and summary["changed"] == 3
    assert summary["directions"] == {"up": 1, "down": 1, "to_null": 1, "from_null": 0}
    assert summary["by_verifier"]["math"] == {"items": 3, "changed": 2, "up": 1, "down": 1,
                                              "to_null": 0, "from_null": 0,
                                              "status_changed": 2}
    assert summary["status_transitions"]["math"] == {"ok → ok": 1, "ok → timeout": 1}
    assert summary["provenance"]["math"] == {"before": ["f1"], "after": "f1", "changes": []}
    assert [e["new"]["status"] for e in summary["examples"]["math"]["down"]] == ["timeout"]


def test_fields_of_other_types_are_absent_and_a_fingerprint_malformed() -> None:
    """What a file holds is summarised for what it is: a fingerprint that is a number, an
    object or null beside strings sorts as "malformed" / "not logged", not a TypeError."""
    lines = [_line(0.0, 1.0, "ok", "ok") for _ in range(6)]
    for line, block in zip(lines, [{"fingerprint": 1}, {"fingerprint": {"a": 1}}, "v1",
                                   {"fingerprint": None}, None, BLOCK], strict=True):
        line["previous"]["provenance"] = block
    lines += [{"origin": ["x"], "item": ["not", "an", "item"], "reward": "1",
               "result": "ok", "provenance": 3, "previous": "old"}]
    summary = summarize(lines)
    assert summary["provenance"]["math"]["before"] == ["f1", "malformed", "not logged"]
    assert "malformed" in summary["provenance"]["math"]["changes"]
    assert summary["items"] == 7 and summary["changed"] == 6
    assert summary["by_verifier"]["None"]["items"] == 1
    assert summary["provenance"]["None"]["after"] == "malformed"
