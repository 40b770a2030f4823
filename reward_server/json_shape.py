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
"""

from __future__ import annotations

import re

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


class JsonShape:
    """Counts ``containers`` (arrays and objects) and ``values`` (containers, commas and
    colons: a value or key each) outside strings over the chunks ``feed`` is given."""

    def __init__(self) -> None:
        self.containers = 0
        self.values = 0
        self._in_string = False
        self._escaped = False  # inside a string, the last chunk ended on a backslash

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
