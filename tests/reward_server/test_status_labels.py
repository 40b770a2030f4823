"""Which statuses label ``reward_items_total`` (reward_server/metrics.py): a verifier's
status may be a completion's choice, and each label is a series kept for good."""

from __future__ import annotations

from reward_server import metrics


def test_a_verifiers_first_short_statuses_are_labels_and_the_rest_other(monkeypatch) -> None:
    monkeypatch.setattr(metrics, "_statuses", {})
    monkeypatch.setattr(metrics, "MAX_STATUSES", 3)
    assert [metrics.status_label("v", s) for s in ("ok", "wrong", "ok", "x" * 41, "a b",
                                                   "", "timeout", "late")] == [
        "ok", "wrong", "ok", "other", "other", "other", "timeout", "other"]
    assert metrics.status_label("w", "late") == "late"  # each verifier has its own room
    assert metrics.status_label("v", "wrong") == "wrong"  # a label once is one for good
