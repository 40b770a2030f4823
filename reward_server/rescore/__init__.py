"""Score stored rollouts again on a server, and say which verdicts changed.

    reward-rescore runs/grpo --url http://reward:8000      # our trainer's rollouts.jsonl
    reward-rescore trl-out/ --url http://reward:8000       # TRL's completions/*.parquet

    from reward_server.rescore import rescore
    summary = rescore("runs/grpo", "http://reward:8000")

Each stored item (``sources``) goes to the server again through ``RewardClient`` (batches,
retries, failover); each new result is appended to the output as a rollout record
(``reward_server.rollout_log``) with the old one under ``previous``, so the output can itself
be re-scored later. The output is the progress: a run that stops (a server down past the
client's retries, Ctrl-C) resumes after its last whole line, when asked to (``resume``): an
output already there is otherwise refused, since a rollouts folder may be someone else's, and
lines planted in it would pass for this server's verdicts. The output is opened without
following a symbolic link and must be a regular file. The summary (``summary``) is made from
the whole output at the end, resumed parts included. The output's lines are read as the
input's are (``sources.lines``, ``sources.parse``) under twice the input's line limit: each
holds an input line's fields and the server's new result and provenance beside them.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reward_server.client import RewardClient
from reward_server.rescore.sources import (
    MAX_LINE_BYTES,
    SourceError,
    Stored,
    count,
    files_of,
    lines,
    parse,
    read,
)
from reward_server.rescore.summary import summarize

__all__ = ["SourceError", "default_output", "rescore"]

BATCH = 256  # records a request: the client splits larger ones and spreads them anyway


def default_output(source: Path) -> Path:
    """``<dir>/rescored.jsonl`` for a directory, ``<name>.rescored.jsonl`` beside a file."""
    if source.is_dir():
        return source / "rescored.jsonl"
    return source.with_name(f"{source.stem}.rescored.jsonl")


def _open_output(out: Path, resume: bool) -> int:
    """``out`` opened for reading and appending: a regular file, never through a symbolic
    link (which could point at any file of the user's); one already there only to resume."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    if not resume:
        flags |= os.O_EXCL
    try:
        fd = os.open(out, flags, 0o644)
    except FileExistsError:
        raise SourceError(f"{out}: exists: --resume (resume=True) goes on from an output of "
                          "yours; --out names another file") from None
    except OSError as exc:  # ELOOP: a symbolic link
        raise SourceError(f"{out}: cannot write the output there ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SourceError(f"{out}: not a regular file")
    return fd


def _done(f: Any, out: Path, max_line_bytes: int) -> list[str]:
    """The origins already written to the output ``f``; a line cut short by a crash is
    dropped from the file (it is scored again), after a whole line rescore wrote only: a
    file of something else is refused, never cut."""
    origins, whole = [], 0
    for number, line in lines(f, str(out), max_line_bytes):
        if not line.endswith(b"\n") and origins:
            f.truncate(whole)
            break
        whole += len(line)
        if not line.strip():
            continue
        try:
            origin = parse(line, f"{out}:{number}")["origin"]
        except (SourceError, KeyError, TypeError):
            origin = None
        if not isinstance(origin, str):
            raise SourceError(f"{out}:{number}: not a line rescore wrote") from None
        origins.append(origin)
    f.seek(0, os.SEEK_END)
    return origins


def _written(f: Any, out: Path, max_line_bytes: int) -> Iterator[dict[str, Any]]:
    """The output's records, from its start (``_done`` checked those it did not write)."""
    f.seek(0)
    for number, line in lines(f, str(out), max_line_bytes):
        if line.strip():
            record = parse(line, f"{out}:{number}")
            if not isinstance(record, dict):
                raise SourceError(f"{out}:{number}: not a line rescore wrote")
            yield record


def _line(old: Stored, reward: float | None, result: dict[str, Any],
          provenance: dict[str, Any] | None) -> dict[str, Any]:
    return {"origin": old.origin, "step": old.step, "item": old.item, "reward": reward,
            "result": result, "provenance": provenance,
            "previous": {"reward": old.reward, "result": old.result,
                         "provenance": old.provenance}}


def _batches(records: Iterator[Stored], size: int) -> Iterator[list[Stored]]:
    while batch := list(itertools.islice(records, size)):
        yield batch


def rescore(source: str | Path, client: str | list[str] | RewardClient,
            out: str | Path | None = None, *, batch: int = BATCH, examples: int = 3,
            progress: bool = True, resume: bool = False,
            max_line_bytes: int = MAX_LINE_BYTES, **client_options: Any) -> dict[str, Any]:
    """Score ``source``'s stored items again on ``client`` (a client, or server URLs with
    ``client_options``), write the new results to ``out`` (``default_output``; one there
    already only with ``resume``: go on after its last whole line), and return the summary
    of all of ``out``. Raises ``SourceError`` for input it cannot read (a line longer than
    ``max_line_bytes`` among it) or an output it will not write, and the client's errors for
    a server that does not answer (what was scored stays written)."""
    source = Path(source)
    out = Path(out) if out is not None else default_output(source)
    files_of(source)  # a missing input is named before an output is made for it
    own = not isinstance(client, RewardClient)
    scorer = RewardClient(client, **client_options) if own else client
    created = not out.exists()
    f = os.fdopen(_open_output(out, resume), "rb+")
    try:
        done = _done(f, out, 2 * max_line_bytes)
        records = read(source, max_line_bytes)
        for index, old in enumerate(itertools.islice(records, len(done))):
            if old.origin != done[index]:  # another input's output: never mix two
                raise SourceError(f"{out}: line {index + 1} is {done[index]}'s, not "
                                  f"{old.origin}'s: written for another input")
        # the first record read before the bar shows: an input of the wrong kind is one line
        first = list(itertools.islice(records, 1))
        records = itertools.chain(first, records)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=count(source, max_line_bytes), initial=len(done), desc="rescore",
                       unit="item", dynamic_ncols=True)
        try:
            for chunk in _batches(records, batch):
                scored = scorer.rewards([old.item for old in chunk])
                f.write("".join(json.dumps(_line(old, scored.rewards[i], scored.results[i],
                                                 scored.provenance_of(i)),
                                           ensure_ascii=False) + "\n"
                                for i, old in enumerate(chunk)).encode())
                f.flush()
                os.fsync(f.fileno())  # what is written is what a resume skips
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        return summarize(_written(f, out, 2 * max_line_bytes), examples)
    except BaseException:
        if created and os.fstat(f.fileno()).st_size == 0:
            out.unlink()  # nothing scored: the next run needs no --resume
        raise
    finally:
        f.close()
        if own:
            scorer.close()
