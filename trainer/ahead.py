"""Asynchronous GRPO: rollouts drawn on a thread while the update runs.

The engine is a process of its own, so it can draw step k+1's rollouts (and their rewards
can be scored) while the trainer updates on step k's. A batch for step j is drawn only with
weights that have taken at least j − ``max_staleness`` optimizer steps, so no sample trains
more than ``max_staleness`` updates after the policy that drew it (NeMo RL's
``max_trajectory_age_steps``, prime-rl's ``max_async_level``); the importance ratio
π_θ_old/μ (trainer/sampling_correction.py) corrects for the lag, and the step logs it.

Step j's batch is drawn with step j's seeds (trainer/seeds.py), not from torch's generator,
which the update (dropout) may be drawing from on the other thread at the same time: its
seeds are the ones the synchronous loop, or the uninterrupted run of a resumed one, draws
step j with, however the two threads interleave.

The trainer copies its weights after each update (``publish``), in its own thread, where
they are safe to read; the drawing thread hands the newest copy to the engine between two
batches, so the engine never waits for a copy and the update never waits for the engine.
"""

from __future__ import annotations

import threading
from collections import deque

from trainer.engine.client import StagedWeights
from trainer.engine.colocated import ColocatedEngine
from trainer.sampler import RolloutSampler, SampledBatch


class AheadSampler:
    """Batches for steps ``start``, ``start + 1``, ... drawn up to ``max_staleness`` steps
    ahead of the update."""

    def __init__(self, sampler: RolloutSampler, engine: ColocatedEngine, max_staleness: int,
                 start: int, until: int) -> None:
        """Draws the batches of steps ``start`` to ``until - 1``."""
        self.sampler, self.engine, self.max_staleness = sampler, engine, max_staleness
        self._published = start  # the version the trainer's policy is at
        self._loaded = start  # the version the engine holds (given it before this starts)
        self._staged: tuple[int, StagedWeights] | None = None
        self._in_hand: StagedWeights | None = None  # the copy the engine is loading
        self._ready: deque[SampledBatch] = deque()
        self._failure: BaseException | None = None
        self._until = until
        self._drawn_all = False
        self._closed = False
        self._changed = threading.Condition()
        # one hand-over at a time, in order: a newer copy is never overwritten by an older
        # one that waited for the engine longer
        self._handing_over = threading.Lock()
        self._thread = threading.Thread(target=self._draw, args=(start, until), daemon=True,
                                        name="rollouts-ahead")
        self._thread.start()

    def next_batch(self) -> SampledBatch:
        """The next step's batch, once drawn; what the drawing thread raised, raised here."""
        with self._changed:
            self._changed.wait_for(
                lambda: self._ready or self._failure is not None or self._drawn_all)
            if self._ready:
                return self._ready.popleft()
            if self._failure is not None:
                raise self._failure
            raise RuntimeError(f"drawing ahead ends at step {self._until} (max_steps): a "
                               "step past it has no batch")

    def publish(self, version: int) -> None:
        """The policy has taken ``version`` optimizer steps: its weights are copied now, for
        the engine to take before its next batch."""
        staged = self.engine.stage()
        with self._changed:
            old, self._staged = self._staged, (version, staged)
            self._published = version
            self._changed.notify_all()
        if old is not None:
            old[1].close()

    def sync_now(self) -> None:
        """The engine takes the newest weights before anything else it draws (greedy
        evaluation reads the policy as it is)."""
        self._take_staged()

    def close(self, wait: bool = True, hand_over: bool = False) -> None:
        """Stops drawing. Weights staged and not taken are dropped, unless ``hand_over``:
        an engine that outlives the trainer (given to it) is then left with the trained
        policy, and a failure to load them is raised, never left as stale weights. Dropped
        is right for an engine about to be closed with the run, stopping on an error (the
        engine may be the error), or interrupted. With ``wait`` False (interrupted) the
        draw in flight is not waited for: the thread is a daemon, and ends with the
        engine's request."""
        hand_over = hand_over and wait
        with self._changed:  # with the closing: the thread never takes what is dropped
            self._closed = True
            dropped = None if hand_over else self._staged
            if not hand_over:
                self._staged = None
            in_hand = None if wait else self._in_hand
            self._changed.notify_all()
        for copy in (dropped and dropped[1], in_hand):  # in hand: else the thread deletes it
            if copy is not None:
                copy.close()
        if not wait:
            return
        self._thread.join()
        if hand_over and self._failure is None:
            self._take_staged()
        elif self._staged is not None:
            self._staged[1].close()

    def _draw(self, step: int, until: int) -> None:
        try:
            while step < until:
                with self._changed:
                    self._changed.wait_for(lambda step=step: self._closed or (
                        step - self._published <= self.max_staleness))
                    if self._closed:
                        return
                self._take_staged()
                version = self._loaded  # greedy evaluation may hand newer weights over
                batch = self.sampler.sample_batch(step)  # meanwhile: then this overstates the lag
                batch.version = version
                with self._changed:
                    self._ready.append(batch)
                    self._changed.notify_all()
                step += 1
            with self._changed:
                self._drawn_all = True
                self._changed.notify_all()
        except BaseException as exc:  # noqa: BLE001 - raised in the trainer's thread
            with self._changed:
                self._failure = exc
                self._changed.notify_all()

    def _take_staged(self) -> None:
        with self._handing_over:
            with self._changed:
                staged, self._staged = self._staged, None
                if staged is None:
                    return
                version, weights = staged
                self._in_hand = weights
            try:
                self.engine.load(weights)
            finally:
                with self._changed:
                    self._in_hand = None
                weights.close()
            self._loaded = version
