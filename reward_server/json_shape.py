"""How many arrays, objects and values a JSON body holds, counted as its bytes arrive.

What parsing a body costs is what it holds, not its size: ``json.loads`` builds an object
per value in one C call that holds the interpreter lock throughout (on a thread or not), so
a 55 MB body of 4 million keys held every other caller for 4 s. Counted here before the
body is parsed, a body past the count is refused as it arrives.

Only what lies outside strings counts: the text of a completion or a program (its commas,
brackets and LaTeX braces) is one value however it reads, so the limit can sit where
parsing is cheap without refusing prose. A string cut between two chunks carries one bit
(inside a string, after a backslash) over, so each byte is looked at a bounded number of
times whatever the chunks. Strings are skipped by ``bytes.find`` (memchr: a 58 MB body of
base64 files in 0.03 s) where a chunk holds few quotes and backslashes, a step each; a chunk
dense with them by regular expressions (C speed, but a character at a time: the same body
took 0.4 s of the event loop that way).

Where a caller gives them, two more limits are watched, for what bytes and counts do not
bound either: how deep arrays and objects nest (``max_depth``: past Python's recursion limit
the parser raises ``RecursionError``, whose text is Python's, not a field's) and how long a
number literal is (``max_number_chars``: an integer's parse grows with the square of its
digits, 117 us for 4299 of them, and past 4300 Python refuses it with a message of its own).
Both are read off the text outside strings at C speed (``bytes.translate``, ``find``); only a
chunk whose arrays and objects could take the depth past the limit is followed bracket by
bracket (``accumulate``: ~30 ns a bracket, a third of what parsing them costs), so that cost
is bounded by the arrays and objects a body may hold.
"""

from __future__ import annotations

import re
from array import array
from itertools import accumulate

# a string's text up to its closing quote: anything but a quote or a backslash, or a
# backslash and the character it escapes (JSON's grammar, as json.loads reads it)
_BODY = rb'[^"\\]*(?:\\.[^"\\]*)*'
_STRING_REST = re.compile(_BODY, re.S)
_STRING = re.compile(rb'"' + _BODY + rb'"', re.S)
# text outside strings with whole strings in it, up to a string the chunk does not finish
_WHOLE = re.compile(rb'(?:[^"]*"' + _BODY + rb'")*[^"]*', re.S)
# a chunk with more than one quote or backslash in this many bytes is scanned by the regular
# expressions: a step of ``_skim`` costs what they take for about as many bytes
SPARSE = 256
# outside strings, an opening bracket is a step in (1), a closing one a step out (-1 as a
# signed byte); everything else is deleted
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
# a number literal is a run of these (JSON's digits, sign, point and exponent): each
# becomes "0", anything else " ", so a run past the limit is a find of that many "0"s
_NUMBER = bytes(0x30 if chr(c) in "-+.0123456789eE" else 0x20 for c in range(256))


class JsonShape:
    """Counts ``containers`` (arrays and objects) and ``values`` (containers, commas and
    colons: a value or key each) outside strings over the chunks ``feed`` is given; with
    ``max_depth``, ``too_deep`` says whether arrays and objects opened less those closed went
    past it at some point (JSON's nesting depth; text that closes more than it opened is no
    JSON, and the parser stops there);
    with ``max_number_chars``, ``number_too_long`` whether a number literal (a run of
    ``-+.0-9eE`` outside strings) was longer."""

    def __init__(self, max_depth: int | None = None, max_number_chars: int | None = None
                 ) -> None:
        self.containers = 0
        self.values = 0
        self.max_depth = max_depth
        self.max_number_chars = max_number_chars
        self.too_deep = False
        self.number_too_long = False
        self._in_string = False
        self._escaped = False  # inside a string, the last chunk ended on a backslash
        self._depth = 0  # arrays and objects opened less those closed
        self._number = 0  # the length of the number literal the text so far ends in

    def nesting_refusal(self, what: str, depth_setting: str, number_setting: str
                        ) -> str | None:
        """Why ``what`` (a body, a message) is refused for its nesting or a number's length,
        naming the setting that bounds each; None when neither limit was passed."""
        if self.too_deep:
            return (f"{what}: arrays and objects nested more than {self.max_depth} deep "
                    f"({depth_setting})")
        if self.number_too_long:
            return (f"{what}: a number of more than {self.max_number_chars} characters "
                    f"({number_setting})")
        return None

    def feed(self, chunk: bytes) -> None:
        if (chunk.count(b'"') + chunk.count(b"\\")) * SPARSE <= len(chunk):
            self._skim(chunk)
            return
        pos = self._finish_string(chunk, 0) if self._in_string else 0
        if self._in_string:
            return
        end = _WHOLE.match(chunk, pos).end()  # type: ignore[union-attr]  # always matches
        self._count(_STRING.sub(b"", chunk[pos:end]))
        if end < len(chunk):  # a string opens that this chunk does not close
            self._in_string = True
            self._finish_string(chunk, end + 1)

    def _finish_string(self, chunk: bytes, pos: int) -> int:
        """Past the string ``pos`` is inside: where it closes, or the chunk's end (the
        string still open, and whether a backslash waits for its character)."""
        if self._escaped:
            self._escaped = False
            pos += 1
            if pos > len(chunk):  # an empty chunk: still waiting
                self._escaped = True
                return len(chunk)
        end = _STRING_REST.match(chunk, pos).end()  # type: ignore[union-attr]
        if end < len(chunk) and chunk[end] == ord('"'):
            self._in_string = False
            return end + 1
        self._escaped = end < len(chunk)  # stopped at a backslash, the chunk's last byte
        return len(chunk)

    def _count(self, outside: bytes, start: int = 0, end: int | None = None) -> None:
        end = len(outside) if end is None else end
        containers = outside.count(b"[", start, end) + outside.count(b"{", start, end)
        self.containers += containers
        self.values += (containers + outside.count(b",", start, end)
                        + outside.count(b":", start, end))
        if self.max_depth is None and self.max_number_chars is None:
            return
        if start or end < len(outside):  # a piece of a chunk: only the watched limits copy it
            outside = outside[start:end]
        if self.max_depth is not None and not self.too_deep:
            self._nest(outside, containers)
        if self.max_number_chars is not None and not self.number_too_long:
            self._numbers(outside.translate(_NUMBER), self.max_number_chars)

    def _nest(self, outside: bytes, opens: int) -> None:
        """The depth after ``outside``, and whether it went past ``max_depth`` on the way."""
        assert self.max_depth is not None
        if self._depth + opens > self.max_depth:  # it may: followed step by step, at C speed
            steps = array("b", outside.translate(_STEPS, _NOT_BRACKETS))
            self.too_deep = max(accumulate(steps, initial=self._depth)) > self.max_depth
        self._depth += opens - outside.count(b"]") - outside.count(b"}")

    def _numbers(self, digits: bytes, limit: int) -> None:
        """Whether ``digits`` (``outside`` as ``_NUMBER`` maps it) holds, or continues the
        number the text before ended in into, a number of more than ``limit`` characters."""
        lead = digits.find(b" ")
        if lead < 0:  # a number all through, cut at both ends
            self._number += len(digits)
        else:
            self.number_too_long = (self._number + lead > limit
                                    or digits.find(b"0" * (limit + 1), lead) >= 0)
            self._number = len(digits) - 1 - digits.rfind(b" ")
        if self._number > limit:
            self.number_too_long = True

    def _skim(self, chunk: bytes) -> None:
        """``feed`` by ``bytes.find``: a step per quote or backslash, memchr between."""
        pos, size = 0, len(chunk)
        quote = -1  # the next quote at or after pos, inside a string
        while pos < size:
            if not self._in_string:
                quote = chunk.find(b'"', pos)
                self._count(chunk, pos, size if quote < 0 else quote)
                if quote < 0:
                    return
                self._in_string, pos = True, quote + 1
                continue
            if self._escaped:  # the character a backslash in the last chunk escapes
                self._escaped, pos = False, pos + 1
                continue
            if quote < pos:
                quote = chunk.find(b'"', pos)
                quote = size if quote < 0 else quote
            slash = chunk.find(b"\\", pos, quote)
            if slash >= 0:  # an escape before the quote: past it, the string goes on
                self._escaped = slash + 1 == size
                pos = slash + 2
            elif quote == size:  # the string goes on into the next chunk
                return
            else:
                self._in_string, pos = False, quote + 1
