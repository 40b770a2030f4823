"""Text a result echoes back from a candidate, made safe to serialise.

A JSON request may carry a lone surrogate (``"\\ud800"``); Python keeps it in the string, and
the JSON encoder of the response then fails, losing the whole batch. Every verifier that
echoes candidate text in a result passes it through ``printable`` (the sandbox's runner and
harness do the same to a program's output)."""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` as valid Unicode: a lone surrogate becomes the six characters ``\\ud800``."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
