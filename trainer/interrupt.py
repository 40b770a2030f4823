"""How a signal stops a run. One rank stops where it stands: Ctrl-C's KeyboardInterrupt,
or SIGTERM raised as one, and the trainer saves the last finished step on its way out; a
SIGTERM in an update is held to the update's end, so that step is saved too. Several ranks
cannot stop where they stand: a checkpoint needs every rank, and each was interrupted
wherever it stood. So while they train, SIGTERM (what torchrun forwards to its ranks, what
Slurm sends every process of a job ahead of a preemption, often twice to a rank: once
itself, once through torchrun) is held until the step ends, the ranks agree at its end
whether any of them got one, and all save that step and stop together
(``GRPOTrainer.train``). Ctrl-C still stops a rank on the spot; the launcher's SIGKILL ends
a step that outlasts its grace. A SIGTERM that came is remembered for the run: an engine
the same SIGTERM ended (Slurm signals the whole job) stops the run as an interrupt, not as
a failure."""

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
    """``holding``: a SIGTERM waits for the end of the step (ranks training) or of the
    update (one rank); ``signals``: how many came since the handler was set."""

    holding: bool = False
    signals: int = 0


HELD = _Held()


def _terminate(signum: int, frame: FrameType | None) -> None:
    HELD.signals += 1
    if not HELD.holding:
        raise Terminated


def sigterm_as_interrupt() -> Callable[[], None]:
    """SIGTERM takes Ctrl-C's orderly way out, unless the caller handles it already;
    returns what puts the default back."""
    HELD.holding, HELD.signals = False, 0
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return lambda: None
    signal.signal(signal.SIGTERM, _terminate)
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL)


def hold_sigterm(holding: bool) -> None:
    """From here on a SIGTERM is held (True), or raised at once (False)."""
    HELD.holding = holding


def sigterm_count() -> int:
    """How many SIGTERMs came, held or not, since the handler was set."""
    return HELD.signals
