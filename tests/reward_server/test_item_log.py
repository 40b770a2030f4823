"""What an item can put in the server's log (reward_server/item_log.py)."""

from __future__ import annotations

import logging

import pytest

from reward_server import item_log


def test_an_items_text_is_cut_short_and_escaped() -> None:
    shown = item_log.quoted("a\nFORGED record\r\n" + "x" * 1000)
    assert "\n" not in shown and "\r" not in shown
    assert shown.startswith("'a\\nFORGED record") and shown.endswith("(+717 chars)")
    assert item_log.quoted("short") == "'short'"


def test_a_throttled_warning_is_one_line_a_period_with_the_count_left_out(
        monkeypatch, caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    monkeypatch.setattr(item_log.time, "monotonic", lambda: now[0])
    warned = item_log.Throttled(logging.getLogger("test.item_log"), every_s=60.0)
    with caplog.at_level(logging.WARNING, "test.item_log"):
        for k in range(5000):
            warned.warning("item %d failed", k)
        now[0] += 61
        warned.warning("item %d failed", 5000)
    assert [r.getMessage() for r in caplog.records] == [
        "item 0 failed", "item 5000 failed (and 4999 more since the last such line)"]
