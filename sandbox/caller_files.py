"""The files a caller sends into the work dir (``files``: path -> base64) and asks back
(``fetch_files``) on ``/run_code``, ``/run_jupyter`` and ``/v1/sessions``: checked here, before
any container is asked for, so that a name or a content the harness could not use is the
caller's 4xx naming the field, never a sandbox failure (503) that spent a container. What a
name may be is the harness's rule (``sandbox/harness/paths.py``), kept on both sides.

The check runs off the event loop (``paths_problem``): the files' base64 is up to the body's
64 MB, and decoding it took 300 ms of every caller's loop per request. It is decoded in
pieces, so that no one call holds the interpreter lock (and the loop) for long."""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Mapping

from sandbox.harness.paths import BadPath, clashes, path_parts, shown

MAX_FETCH_FILES = 256  # paths one call may ask back
MAX_FILES = 1024  # files one call may send: each is a path to check and a file to write
# characters of base64 decoded at a time (a multiple of 4): about 1 ms with the lock held
BASE64_PIECE = 1 << 18


def check_paths(files: Mapping[str, str], fetch: tuple[str, ...], source: str) -> str | None:
    """Why the files' names or contents, or the names asked back, cannot be used (naming the
    field), or None. ``source``: the program's own file name ('' for none)."""
    if len(files) > MAX_FILES:
        return f"files: {len(files)} files, more than {MAX_FILES}"
    named = {}
    for name in files:
        if name == source:
            return f"files[{shown(name)}]: the program's own file name in this language"
        try:
            named[name] = path_parts(name)
        except BadPath as exc:
            return f"files[{shown(name)}]: {exc}"
    clash = clashes(named, {source: "the program's own file"} if source else None)
    if clash is not None:
        return clash
    if len(fetch) > MAX_FETCH_FILES:
        return f"fetch_files: {len(fetch)} paths, more than {MAX_FETCH_FILES}"
    for index, name in enumerate(fetch):
        try:
            path_parts(name)
        except BadPath as exc:
            return f"fetch_files[{index}]: {exc}"
    for name, data in files.items():  # the costly part, last
        if not is_base64(data):
            return f"files[{shown(name)}]: not base64"
    return None


async def paths_problem(files: Mapping[str, str], fetch: tuple[str, ...], source: str
                        ) -> str | None:
    """``check_paths`` on a thread: what it decodes is the caller's, megabytes of it."""
    return await asyncio.to_thread(check_paths, files, fetch, source)


def is_base64(text: str) -> bool:
    """Whether ``text`` is base64 as ``b64decode(validate=True)`` reads it, decoded a piece
    at a time: padding only at its end, so a piece before the last holds none."""
    for start in range(0, len(text), BASE64_PIECE):
        piece = text[start:start + BASE64_PIECE]
        if start + BASE64_PIECE < len(text) and "=" in piece:
            return False
        try:
            base64.b64decode(piece, validate=True)
        except (binascii.Error, ValueError):
            return False
    return True
