"""What stands around the value math-verify read from prose: a negation before it ("not
9"), a word after it that changes it ("5 thousand", "2 squared", "3 dozen"). math-verify
reads the number alone, so each would be paid as the bare value.

The value is looked for in the answering sentence first (in "The answer is not 9. I checked
all 9 cases." the last 9 is not the one stated), then in the whole text, and as written
(``1,000`` for the ``1000`` read)."""

from __future__ import annotations

import re

from reward_server.verifiers.math.commit import answering_sentence, negated
from reward_server.verifiers.math.guards import MULTIPLIER_WORDS, mentions

_WRITTEN_NUMBER = re.compile(r"-?\d{1,3}(?:(?:,|\{,\}|\\,| )\d{3})+(?:\.\d+)?")
# right after the value: a word that multiplies, scales, negates or operates on it
_AFTER = re.compile(r"\s*(?:\\text\s*\{\s*)?(?:to\s+the\s+power|raised\s+to|("
                    + MULTIPLIER_WORDS + r"))(?![A-Za-z])", re.IGNORECASE)
_SCALE = re.compile(r"\s*(thousand|million|billion|trillion)(?![A-Za-z])", re.IGNORECASE)


def _mention(text: str, read: str) -> int:
    """Where ``read`` last stands in ``text`` on its own, or written with thousands
    separators; -1 when nowhere."""
    at = mentions(text, read)
    if at >= 0 or not read.lstrip("-").replace(".", "", 1).isdigit():
        return at
    for number in _WRITTEN_NUMBER.finditer(text):
        if re.sub(r"[^\d.\-]", "", number.group()) == read:
            at = number.start()
    return at


def _where(text: str, read: str) -> tuple[str, int, int] | None:
    """(the text it stands in, where it starts, where it ends as written), or None."""
    sentence, anchored, _ = answering_sentence(text)
    for where in ((sentence, text) if anchored else (text,)):
        at = _mention(where, read)
        if at >= 0:
            written = _WRITTEN_NUMBER.match(where, at)
            return where, at, written.end() if written else at + len(read)
    return None


def negated_read(text: str, read: str) -> bool:
    """Whether the value read is negated where it stands ("The answer is not 9.")."""
    found = _where(text, read)
    return found is not None and negated(found[0], found[1])


def multiplied_read(text: str, read: str, reference: str) -> bool:
    """Whether a word right after the value read changes it ("2 squared", "3 dozen", "5
    times 4", "5 thousandths") and the reference has no such word."""
    found = _where(text, read)
    if found is None:
        return False
    word = _AFTER.match(found[0], found[2])
    return word is not None and (word.group(1) or "power").lower() not in reference.lower()


def scaled_read(text: str, read: str) -> str | None:
    """``5000`` for the 5 of "The answer is 5 thousand.": the value a scale word after the
    number read makes it (as ``\\boxed{5 \\text{ thousand}}`` answers 5000); None without."""
    found = _where(text, read)
    scale = _SCALE.match(found[0], found[2]) if found else None
    if scale is None:
        return None
    return read + " \\text{ " + scale.group(1).lower() + "}"
