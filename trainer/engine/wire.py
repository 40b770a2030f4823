"""The connection between the trainer and its engine process: ``multiprocessing``'s
length-framed pickles over a socket pair. Both ends are this project's own code, started
by the trainer (the engine process is its child), so pickle is safe here. Standard library
only: the engine's environment imports this module and vLLM, nothing else of the trainer."""

from __future__ import annotations

import socket
from multiprocessing.connection import Connection


class Channel(Connection):
    """One end of the connection, over a descriptor this process owns."""


def channel_pair() -> tuple[Channel, int]:
    """The trainer's end, and the descriptor to hand the engine process (inheritable)."""
    ours, theirs = socket.socketpair()
    theirs.set_inheritable(True)
    return Channel(ours.detach()), theirs.detach()
