"""The caps on what a caller and the server hold in flight (reward_server/quotas.py), as pure
functions: who counts as one caller, what is refused and with which Retry-After."""

from __future__ import annotations

import math

import pytest

from reward_server.callers import Caller
from reward_server.errors import PayloadTooLarge, TooBusy
from reward_server.quotas import MAX_RETRY_AFTER_S, DrainRate, Quotas, retry_after


def test_the_drain_rate_is_events_per_second_of_the_last_window() -> None:
    rate = DrainRate(window_s=10.0)
    assert rate.per_s(0.0) == 0.0
    for k in range(100):  # 10 a second for 10 s
        rate.add(1, k / 10)
    assert rate.per_s(10.0) == pytest.approx(10.0, rel=0.1)
    # a young history is not read as a slow one: 5 in the first half second is ~10/s
    young = DrainRate(window_s=10.0)
    for k in range(5):
        young.add(1, k / 10)
    assert young.per_s(0.5) == pytest.approx(10.0, rel=0.25)
    # a stop decays it: a minute later it is near nothing
    assert rate.per_s(70.0) < 0.1


def test_retry_after_is_the_excess_over_the_rate_within_bounds() -> None:
    assert retry_after(30, 10.0) == 3
    assert retry_after(1, 1000.0) == 1  # never 0: a client told 0 comes straight back
    assert retry_after(1_000_000, 1.0) == MAX_RETRY_AFTER_S
    assert retry_after(5, 0.0) == MAX_RETRY_AFTER_S  # nothing drained: the queue is stuck


def test_a_caller_past_its_request_cap_is_refused_and_others_are_not() -> None:
    quotas = Quotas(requests_per_caller=2, items_per_caller=0, items_in_flight=0)
    a, b = Caller("team-a", "token:team-a"), Caller("team-b", "token:team-b")
    with quotas.hold(a, 1), quotas.hold(a, 1):
        with pytest.raises(TooBusy) as refused:
            with quotas.hold(a, 1):
                pass
        assert "max_requests_per_caller=2" in refused.value.message
        assert int(refused.value.headers["Retry-After"]) >= 1
        with quotas.hold(b, 1):
            assert quotas.holding(b) == (1, 1)
        assert quotas.holding(a) == (2, 2)
    with quotas.hold(a, 1):  # room again once they are answered
        assert quotas.holding(a) == (1, 1)
    assert quotas.holding(a) == (0, 0) and quotas.items == 0


def test_every_loopback_address_is_one_caller() -> None:
    """Any local process can use any address of 127/8: more addresses buy no more room."""
    quotas = Quotas(requests_per_caller=1, items_per_caller=0, items_in_flight=0)
    with quotas.hold(Caller("127.0.0.1", "loopback"), 1):
        with pytest.raises(TooBusy):
            with quotas.hold(Caller("127.0.0.2", "loopback"), 1):
                pass


def test_items_are_capped_per_caller_and_server_wide() -> None:
    quotas = Quotas(requests_per_caller=0, items_per_caller=10, items_in_flight=15)
    a, b, c = (Caller(n, n) for n in "abc")
    with quotas.hold(a, 8):
        with pytest.raises(TooBusy, match="max_items_per_caller=10"):
            with quotas.hold(a, 3):
                pass
        with quotas.hold(a, 2), quotas.hold(b, 5):  # 15 in flight: the server is full
            with pytest.raises(TooBusy, match="max_items_in_flight=15"):
                with quotas.hold(c, 1):
                    pass
        with quotas.hold(c, 1):
            pass
    # a request that could never be taken is no 429 to retry: a 413 to split
    with pytest.raises(PayloadTooLarge, match="max_items_per_caller=10"):
        with quotas.hold(a, 11):
            pass


def test_a_refusal_takes_nothing_and_a_failure_gives_back() -> None:
    quotas = Quotas(requests_per_caller=1, items_per_caller=0, items_in_flight=0)
    a = Caller("a", "a")
    with pytest.raises(RuntimeError):
        with quotas.hold(a, 4):
            raise RuntimeError("the request failed")
    assert quotas.holding(a) == (0, 0) and quotas.items == 0
    with quotas.hold(a, 1):
        with pytest.raises(TooBusy):
            with quotas.hold(a, 1):
                pass
        assert quotas.holding(a) == (1, 1)


def test_retry_after_follows_the_callers_own_drain() -> None:
    """A caller whose requests have been finishing fast is told to come back soon; one whose
    queue has not moved is told the longest."""
    quotas = Quotas(requests_per_caller=1, items_per_caller=0, items_in_flight=0)
    fast, stuck = Caller("fast", "fast"), Caller("stuck", "stuck")
    for _ in range(200):
        with quotas.hold(fast, 1):
            pass
    with quotas.hold(stuck, 1), quotas.hold(fast, 1):
        with pytest.raises(TooBusy) as told_fast:
            with quotas.hold(fast, 1):
                pass
        with pytest.raises(TooBusy) as told_stuck:
            with quotas.hold(stuck, 1):
                pass
    assert told_fast.value.headers["Retry-After"] == "1"
    assert told_stuck.value.headers["Retry-After"] == str(MAX_RETRY_AFTER_S)
    assert math.isfinite(float(told_fast.value.headers["Retry-After"]))


def test_an_idle_callers_record_is_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """Records of callers long idle go (an address-keyed server sees any number of them);
    one recently idle keeps its drain rate."""
    import types

    from reward_server import quotas as module

    clock = [1000.0]
    monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    quotas = Quotas(requests_per_caller=5, items_per_caller=0, items_in_flight=0)
    for k in range(3):
        with quotas.hold(Caller(f"10.0.0.{k}", f"10.0.0.{k}"), 1):
            pass
    clock[0] += module.SWEEP_EVERY_S - 10
    with quotas.hold(Caller("recent", "recent"), 1):
        pass
    clock[0] += 11  # a sweep is due: the first three are long idle, "recent" is not
    assert module.SWEEP_EVERY_S > module.FORGET_AFTER_S > 11
    with quotas.hold(Caller("trigger", "trigger"), 1):
        pass
    assert sorted(map(str, quotas._held)) == ["recent", "trigger"]


def test_bodies_held_count_per_caller_and_for_the_server() -> None:
    quotas = Quotas(requests_per_caller=0, items_per_caller=0, items_in_flight=0,
                    body_bytes_per_caller=100, body_bytes_in_flight=150)
    a, b, c = (Caller(n, f"token:{n}") for n in "abc")
    quotas.take_body(a, 60)
    with pytest.raises(TooBusy) as refused:
        quotas.take_body(a, 41)
    assert "max_body_bytes_per_caller=100" in refused.value.message
    quotas.take_body(a, 40)  # exactly the cap
    quotas.take_body(b, 50)  # the server holds 150
    with pytest.raises(TooBusy) as refused:
        quotas.take_body(c, 1)
    assert "max_body_bytes_in_flight=150" in refused.value.message
    quotas.give_body(a, 100)
    quotas.take_body(c, 100)  # room again once A's are answered
    quotas.give_body(b, 50)
    quotas.give_body(c, 100)
    with pytest.raises(TooBusy):
        quotas.take_body(c, 101)


def test_a_request_counts_from_its_hold_whatever_its_items() -> None:
    """The turnstile's hold on a request is separate from its items' (taken once its body
    is parsed): requests on their way count to the cap before any item is known."""
    quotas = Quotas(requests_per_caller=2, items_per_caller=0, items_in_flight=0)
    a = Caller("a", "token:a")
    with quotas.hold_request(a), quotas.hold_request(a):
        assert quotas.holding(a) == (2, 0)
        with pytest.raises(TooBusy):
            with quotas.hold_request(a):
                pass
        with quotas.hold_items(a, 5):
            assert quotas.holding(a) == (2, 5)
    assert quotas.holding(a) == (0, 0)
