"""The seeds of a run's sampled draws, derived from where they stand in the run rather than
drawn from a generator.

Draw k of step s on rank r of a run seeded ``seed`` gets a seed that is a pure function of
(``seed``, r, s, k): numpy's ``SeedSequence`` with (r, s, k) as its spawn key, the path of
that stream in the tree of streams the run's seed roots (JAX's ``fold_in``, PyTorch
Lightning's per-worker seeds, the same idea). Drawn from torch's global generator instead,
a draw's seed would depend on everything else that consumed it before: dropout in the
update, which drawing ahead (trainer/ahead.py) runs on another thread at the same time, so
the seeds would follow thread timing; and each other consumer (an evaluation, a library)
would shift the rollouts of every later step.

Derived, nothing needs saving: a resumed run's step s draws with the seeds the uninterrupted
run's step s drew with (synchronously, the same draw; drawing ahead, from the checkpoint's
weights rather than older ones), and the synchronous loop and drawing ahead, whose draws of
step s happen at different moments, draw from the same seeds. A checkpoint of a generator's
state could only give the first of these, and only if it were taken between two steps'
draws, which drawing ahead never is.

A greedy draw (an evaluation) takes no seed at all, so how often a run evaluates changes
nothing it trains on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEED_LIMIT = 2**31 - 1  # the engine's seeds are in [0, SEED_LIMIT), as torch.randint drew them


def derive_seed(seed: int, rank: int, step: int, draw: int) -> int:
    """The seed of draw ``draw`` of step ``step`` on ``rank`` of a run seeded ``seed``."""
    # SeedSequence takes a non-negative entropy: a negative seed is its 64-bit pattern
    state = np.random.SeedSequence(seed % 2**64, spawn_key=(rank, step, draw))
    return int(state.generate_state(1, dtype=np.uint64)[0] % SEED_LIMIT)


@dataclass
class DrawSeeds:
    """The seeds of one step's sampled draws, in the order they are made: every engine call
    of the step (each round of dynamic sampling, each turn round of tool rollouts) takes
    the next. One step is drawn by one thread at a time, so the count needs no lock."""

    seed: int  # the run's
    rank: int
    step: int
    drawn: int = 0  # draws made so far

    def next(self) -> int:
        seed = derive_seed(self.seed, self.rank, self.step, self.drawn)
        self.drawn += 1
        return seed
