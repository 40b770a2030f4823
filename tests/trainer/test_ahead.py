"""The drawing-ahead thread (trainer/ahead.py) with stand-ins at its two edges, the sampler
and the engine: the staleness bound, the order of hand-overs, and its ends (a failure, the
last step), without an engine process."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from trainer.ahead import AheadSampler
from trainer.sampler import SampledBatch

pytestmark = pytest.mark.timeout(120)  # a broken hand-over waits for ever: end it sooner


class _Staged:
    def __init__(self, version: int) -> None:
        self.version, self.closed = version, False

    def close(self) -> None:
        self.closed = True


class _Engine:
    """Records the versions it was handed; ``stage`` copies the trainer's current one."""

    def __init__(self) -> None:
        self.current, self.loaded = 0, [0]

    def stage(self) -> _Staged:
        return _Staged(self.current)

    def load(self, staged: _Staged) -> None:
        self.loaded.append(staged.version)


class _Sampler:
    def __init__(self, engine: _Engine, fail_at: int | None = None) -> None:
        self.engine, self.fail_at, self.drawn = engine, fail_at, 0
        self.gate = threading.Semaphore(0)  # the test lets each draw through
        self.steps: list[int] = []  # the step each batch was drawn for
        self.entered = threading.Semaphore(0)  # a draw has begun

    def sample_batch(self, step: int) -> SampledBatch:
        self.entered.release()
        self.gate.acquire()
        self.steps.append(step)
        if self.drawn == self.fail_at:
            raise ValueError("the reward server is down")
        self.drawn += 1
        return SampledBatch(None, None, {}, stream_position=self.drawn)  # type: ignore[arg-type]


def _ahead(max_staleness: int, until: int, start: int = 0, **kw: Any
           ) -> tuple[AheadSampler, _Sampler, _Engine]:
    engine = _Engine()
    engine.current = engine.loaded[0] = start
    sampler = _Sampler(engine, **kw)
    ahead = AheadSampler(sampler, engine, max_staleness, start, until)  # type: ignore[arg-type]
    return ahead, sampler, engine


def test_no_batch_is_drawn_more_than_max_staleness_updates_before_it_trains() -> None:
    ahead, sampler, engine = _ahead(max_staleness=2, until=6)
    sampler.gate.release(10)  # draw as fast as allowed
    for step in range(6):
        batch = ahead.next_batch()
        assert batch.stream_position == step + 1  # in order
        assert step - batch.version <= 2
        engine.current = step + 1
        ahead.publish(step + 1)
    ahead.close()
    assert engine.loaded == sorted(engine.loaded)  # hand-overs in order, newest last


def test_closing_hands_no_weights_over() -> None:
    """Weights staged after the last step are dropped, not loaded: nothing samples with
    them, and a load failing there would fail a run whose every step trained."""
    ahead, sampler, engine = _ahead(max_staleness=1, until=1)
    sampler.gate.release(1)
    ahead.next_batch()
    engine.current = 1
    ahead.publish(1)
    staged = ahead._staged
    ahead.close()
    assert engine.loaded == [0]
    assert staged is not None and staged[1].closed


def test_an_engine_that_outlives_the_trainer_is_left_with_the_trained_policy() -> None:
    """An engine given to the trainer (a notebook's, a test session's) is used after the
    run: closing hands it the weights staged after the last step."""
    ahead, sampler, engine = _ahead(max_staleness=1, until=1)
    sampler.gate.release(1)
    ahead.next_batch()
    engine.current = 1
    ahead.publish(1)
    ahead.close(hand_over=True)
    assert engine.loaded == [0, 1]


def test_closing_without_waiting_leaves_the_draw_in_flight() -> None:
    """Interrupted, the trainer stops drawing without waiting for a draw in flight (an
    engine's can take up to vllm_request_timeout_s; the trainer ends the engine), and
    drops the weights staged for it."""
    ahead, sampler, engine = _ahead(max_staleness=1, until=3)
    sampler.gate.release(1)
    ahead.next_batch()
    for _ in range(2):  # the thread draws step 1's batch now, held at the gate
        sampler.entered.acquire()
    engine.current = 1
    ahead.publish(1)
    staged = ahead._staged
    ahead.close(wait=False)  # returns with the draw still held
    assert staged is not None and staged[1].closed
    assert ahead._thread.is_alive()
    sampler.gate.release(5)
    ahead._thread.join()
    assert engine.loaded == [0]


def test_a_failure_while_drawing_is_raised_to_the_trainer_after_the_batches_before_it() -> None:
    ahead, sampler, _ = _ahead(max_staleness=1, until=5, fail_at=1)
    sampler.gate.release(3)
    assert ahead.next_batch().stream_position == 1
    ahead.publish(1)
    with pytest.raises(ValueError, match="the reward server is down"):
        ahead.next_batch()
    ahead.close()


def test_a_step_past_the_last_raises_rather_than_waits() -> None:
    ahead, sampler, _ = _ahead(max_staleness=1, until=2)
    sampler.gate.release(5)
    ahead.next_batch()
    ahead.publish(1)
    ahead.next_batch()
    ahead.publish(2)
    with pytest.raises(RuntimeError, match="ends at step 2"):
        ahead.next_batch()
    ahead.close()


def test_each_batch_is_drawn_as_its_own_steps() -> None:
    """A run resumed at step 3 draws steps 3, 4, 5, each told which it is (its seeds are
    that step's: trainer/seeds.py), however far ahead it is drawn."""
    ahead, sampler, engine = _ahead(max_staleness=2, until=6, start=3)
    sampler.gate.release(10)
    for step in range(3, 6):
        ahead.next_batch()
        engine.current = step + 1
        ahead.publish(step + 1)
    ahead.close()
    assert sampler.steps == [3, 4, 5]


def test_closing_without_waiting_deletes_the_copy_being_loaded() -> None:
    """Interrupted while the engine loads a copy (the trainer ends the engine and does not
    wait for the thread), the copy is deleted all the same: a daemon thread may never run
    its cleanup before the process ends, and the copy is the model's size in /dev/shm."""
    ahead, sampler, engine = _ahead(max_staleness=1, until=3)
    loading, release = threading.Event(), threading.Event()

    def load(staged: _Staged) -> None:
        loading.set()
        release.wait()

    engine.load = load  # type: ignore[method-assign]
    sampler.gate.release(2)
    ahead.next_batch()
    ahead.next_batch()  # both drawn: the thread waits for step 1's weights to draw step 2's
    engine.current = 1
    ahead.publish(1)
    loading.wait()
    in_hand = ahead._in_hand
    ahead.close(wait=False)
    assert in_hand is not None and in_hand.closed
    release.set()
    sampler.gate.release(5)
    ahead._thread.join()
