"""Identical sources compile once across the items of a batch: a GRPO group, or one
program checked against several test sets, often repeats a program. The first execution of a
(language, source) compiles it and its harness sends back what the compiler made (or the
compile error); executions of the same source that arrive meanwhile wait for it, and those
and later ones unpack the build instead of compiling. Kept by byte size, least recently used
first out; a build that is too large to ship (``harness/artifacts.py``) is not kept.

A build is the candidate's own program for exactly that source, keyed by everything its
compile depends on (the language's row with its commands, and the source): no other program
can run it. A dataset's checker's build is kept the same way (``checker_key``), so an item's
later turn in another container unpacks its checker instead of compiling it again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from typing import Any

Build = dict[str, Any]  # {"files": {path: [mode, base64]}} or {"compile_error": detail}


def _digest(parts: list[Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True)
                          .encode("utf-8", "surrogatepass")).hexdigest()


def build_key(job: dict[str, Any]) -> str | None:
    """The key of a stdin/stdout job's build; None for a language that does not compile."""
    if job.get("mode") != "stdio" or not job["language"].get("compile"):
        return None
    return _digest([job["language"], job["source"]])


def checker_key(job: dict[str, Any]) -> str | None:
    """The key of a job's checker's build (its language row and source); None without a
    checker or for one that does not compile."""
    checker = job.get("checker")
    if not checker or not checker["language"].get("compile"):
        return None
    return _digest(["checker", checker["language"], checker["source"]])


def valid_build(value: Any) -> Build | None:
    """``value`` if it has the shape the harness sends, else None."""
    if not isinstance(value, dict) or len(value) != 1:
        return None
    if isinstance(value.get("compile_error"), str):
        return value
    files = value.get("files")
    if isinstance(files, dict) and all(
            isinstance(k, str) and isinstance(v, list) and len(v) == 2
            and isinstance(v[0], int) and isinstance(v[1], str) for k, v in files.items()):
        return value
    return None


def build_bytes(build: Build) -> int:
    """What a build's files hold, decoded (about three quarters of their base64)."""
    return sum(len(v[1]) for v in build.get("files", {}).values()) * 3 // 4


def _size(build: Build) -> int:
    return sum(len(v[1]) for v in build.get("files", {}).values()) + len(
        build.get("compile_error", ""))


class Builds:
    def __init__(self, max_bytes: int = 128 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._done: OrderedDict[str, Build] = OrderedDict()
        self._bytes = 0
        self._pending: dict[str, asyncio.Future[Build | None]] = {}

    async def claim(self, key: str) -> tuple[Build | None, bool]:
        """(the build, whether the caller must make it). A caller told to make it must call
        ``publish`` once, whatever happens."""
        if key in self._done:
            self._done.move_to_end(key)
            return self._done[key], False
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending), False  # None: compile it yourself
        self._pending[key] = asyncio.get_running_loop().create_future()
        return None, True

    async def made(self, key: str) -> None:
        """Wait, claiming nothing, until a build of ``key`` that is being made is made (or
        given up): an execution waits for it before it takes a worker, not holding one."""
        pending = self._pending.get(key)
        if pending is not None:
            await asyncio.shield(pending)

    def publish(self, key: str, build: Build | None) -> None:
        """The build of a claim (None: none was made); once the first reply of its maker
        brings it, not after the maker's last test."""
        future = self._pending.pop(key, None)
        if future is not None and not future.done():
            future.set_result(build)
        if build is None or key in self._done or (size := _size(build)) > self.max_bytes:
            return
        self._done[key] = build
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, old = self._done.popitem(last=False)
            self._bytes -= _size(old)

    def kept(self, key: str) -> Build | None:
        """A finished build, if one is kept (nothing waits for one being made)."""
        if key in self._done:
            self._done.move_to_end(key)
            return self._done[key]
        return None

    def keep(self, key: str, build: Any) -> None:
        """Keep ``build`` (as the harness sent it: checked here) when it holds files."""
        build = valid_build(build)
        if build is not None and "files" in build and key not in self._done:
            self.publish(key, build)

    def __len__(self) -> int:
        return len(self._done)
