"""How a signal stops a run. One rank stops where it stands: Ctrl-C's KeyboardInterrupt,
or SIGTERM raised as one, and the trainer saves the last finished step on its way out.
Several ranks cannot: a checkpoint needs every rank, and each was interrupted wherever it
stood. So while they train, SIGTERM (what torchrun forwards to its ranks, what Slurm sends
ahead of a preemption) is held until the step ends, the ranks agree at its end whether any
of them got one, and all save that step and stop together (``GRPOTrainer.train``). A second
SIGTERM, or Ctrl-C, still stops a rank on the spot."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM (torchrun, Slurm, Kubernetes, ``timeout``), raised where Ctrl-C's
    KeyboardInterrupt would be: Python's default ends the process on the spot, with the
    engine process running on and a copy of the weights left in /dev/shm."""


@dataclass
class _Held:
    """A SIGTERM held for the end of the step (``holding``: between steps of a run on
    several ranks)."""

    holding: bool = False
    signalled: bool = False


HELD = _Held()


def _terminate(signum: int, frame: FrameType | None) -> None:
    if HELD.holding and not HELD.signalled:
        HELD.signalled = True
        return
    raise Terminated


def sigterm_as_interrupt() -> Callable[[], None]:
    """SIGTERM takes Ctrl-C's orderly way out, unless the caller handles it already;
    returns what puts the default back."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None
    signal.signal(signal.SIGTERM, _terminate)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)


def hold_sigterm(holding: bool) -> None:
    """From here on a first SIGTERM is held for the end of the step (True), or raised at
    once (False); a SIGTERM held and not yet acted on is forgotten either way."""
    HELD.holding, HELD.signalled = holding, False


def sigterm_held() -> bool:
    """Whether a SIGTERM came while it was held."""
    return HELD.signalled
