"""Stored rollouts as they were logged, read back as items with their old verdicts.

What is read, as it is on disk:

- a rollout log (``reward_server.rollout_log``: our trainer's ``rollouts.jsonl``, any loop's
  ``RolloutLog``, or ``reward-rescore``'s own output): one record a line;
- TRL's completions table (``GRPOConfig(log_completions=True)``:
  ``<output_dir>/completions/completions_<step>.parquet``), whose reward columns were made by
  our ``ServerReward``: it logs each row's item, status and provenance beside the completion;
- a directory holding either (a trainer run dir, a TRL output dir).

The order is fixed (files by name, then lines or rows), so a record's place names it and an
interrupted re-score resumes where it stopped.

A stored file may come from anyone, so what reading it costs is bounded before it is parsed:
only regular files are read (a FIFO waits for a writer, a device such as ``/dev/zero`` never
ends), a line at most ``max_line_bytes`` long is read, and its nesting and numbers are held
under what Python's parser takes (``json_shape``). A line that breaks any of these, or a
field of the wrong type, stops the read with a ``SourceError`` naming its file and line, as
every other unreadable line does: a summary over part of a run would pass for the run's.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from reward_server.adapters.items import completion_text
from reward_server.json_shape import JsonShape
from reward_server.rollout_log import FILE

METRICS = "metrics.jsonl"  # our trainer's per-step means: no completion in it
ITEM, STATUS, PROVENANCE = "/item", "/status", "/provenance"  # ServerReward's columns
# A line holds one item with its result and provenance, and an item came to the server in a
# request no larger than its default body limit (64 MiB): a stored line past it is no record
# of ours, and without a limit one endless line (a sparse file) is read into memory whole.
MAX_LINE_BYTES = 64 * 1024 * 1024
# Python's parser stops near 1,000 deep (RecursionError), and what is read is written again
# (the request, the output) from further down the stack; the code verifier takes a test's
# value 64 deep, so no scorable item comes near this.
MAX_DEPTH = 500
# Past 4300 digits Python refuses an integer (its int_max_str_digits), in its own words.
MAX_NUMBER_CHARS = 4300


class SourceError(ValueError):
    """The input is not stored rollouts this reads; the message says what is wrong where."""


@dataclass(frozen=True)
class Stored:
    """One scored item as logged: what was sent, what came back, what produced it."""

    origin: str  # file:line, or file:row:reward column
    item: dict[str, Any]
    reward: float | None
    result: dict[str, Any]
    provenance: dict[str, Any] | None
    step: int | None = None


def files_of(path: Path) -> list[Path]:
    """The files ``path`` stands for, in reading order; each a regular file."""
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory")
    if not path.is_dir():
        return [_regular(path)]
    logs = sorted([*path.glob(FILE), *path.glob("rollouts-rank*.jsonl")])
    tables = sorted(path.glob("completions/*.parquet")) or sorted(path.glob("*.parquet"))
    if logs or tables:
        return [_regular(file) for file in logs or tables]
    if (path / METRICS).exists():
        raise SourceError(f"{path}: {METRICS} holds per-step means, no completions; run the "
                          f"trainer with log_rollouts: true to keep {FILE}")
    raise SourceError(f"{path}: no {FILE} and no TRL completions/*.parquet in it")


NOT_REGULAR = "not a regular file (a FIFO waits for a writer, a device may never end)"


def _regular(file: Path) -> Path:
    """``file``, if what it names (through a link) is a regular file."""
    try:
        mode = os.stat(file).st_mode
    except OSError as exc:
        raise SourceError(f"{file}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise SourceError(f"{file}: {NOT_REGULAR}")
    return file


def open_regular(file: Path) -> BinaryIO:
    """``file`` opened to read, refused unless it is a regular file: opened without waiting
    (a FIFO's open waits for a writer) and checked on the descriptor itself, so a file
    swapped after ``files_of`` looked is refused too."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SourceError(f"{file}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SourceError(f"{file}: {NOT_REGULAR}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def lines(f: BinaryIO, name: str, max_bytes: int) -> Iterator[tuple[int, bytes]]:
    """``(number, line)`` for each line of ``f`` (the last one without its newline where the
    file ends so), none read past ``max_bytes`` (the newline not counted): a longer one is
    a ``SourceError`` naming it."""
    number = 0
    while line := f.readline(max_bytes + 1):
        number += 1
        if len(line) > max_bytes and not line.endswith(b"\n"):
            raise SourceError(f"{name}:{number}: a line longer than {max_bytes} bytes "
                              "(max_line_bytes, --max-line-bytes)")
        yield number, line


def parse(line: bytes, where: str) -> Any:
    """One line's JSON value; a ``SourceError`` naming ``where`` for text that is not UTF-8,
    not JSON, or nested or numbered past what Python's parser takes."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{where}: not UTF-8 (byte {line[exc.start]:#04x} at offset "
                          f"{exc.start})") from None
    shape = JsonShape(max_depth=MAX_DEPTH, max_number_chars=MAX_NUMBER_CHARS)
    shape.feed(line)
    if shape.too_deep:
        raise SourceError(f"{where}: arrays and objects nested more than {MAX_DEPTH} deep")
    if shape.number_too_long:
        raise SourceError(f"{where}: a number of more than {MAX_NUMBER_CHARS} characters")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(f"{where}: not JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # what the shape should have caught first
        raise SourceError(f"{where}: not JSON Python reads ({type(exc).__name__})") from None


def read(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[Stored]:
    for file in files_of(path):
        if file.suffix == ".parquet":
            yield from _table(file)
        else:
            yield from _log(file, max_line_bytes)


def count(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> int:
    """How many records ``read`` yields, cheaply (lines; a table's rows by its metadata)."""
    total = 0
    for file in files_of(path):
        if file.suffix == ".parquet":
            meta = _parquet().ParquetFile(file)
            columns = [n for n in meta.schema_arrow.names if n.endswith(ITEM)]
            total += meta.metadata.num_rows * len(columns)
        else:
            with open_regular(file) as f:
                total += sum(1 for _, line in lines(f, file.name, max_line_bytes)
                             if line.strip())
    return total


def _log(file: Path, max_line_bytes: int) -> Iterator[Stored]:
    with open_regular(file) as f:
        for number, line in lines(f, file.name, max_line_bytes):
            if not line.strip():
                continue
            where = f"{file.name}:{number}"
            yield _record(parse(line, where), where)


def _record(record: Any, where: str) -> Stored:
    if not isinstance(record, dict) or not isinstance(record.get("item"), dict):
        if isinstance(record, dict) and "step" in record and "item" not in record:
            raise SourceError(f"{where}: a metrics line (per-step means), not a scored item; "
                              f"the trainer's items are in {FILE} (log_rollouts: true)")
        raise SourceError(f"{where}: a record needs 'item' (the item as sent, with its "
                          "'verifier')")
    item = record["item"]
    if not isinstance(item.get("verifier"), str):
        raise SourceError(f"{where}: item.verifier: a verifier name is required")
    result = record.get("result") if isinstance(record.get("result"), dict) else {}
    return Stored(where, item, _reward(record.get("reward"), where), result,
                  _provenance(record.get("provenance"), where),
                  _int(record.get("step"), where))


def _provenance(value: Any, where: str) -> dict[str, Any] | None:
    """A stored provenance block: an object (the summary compares its fields), or none; its
    fingerprint a string (the summary sorts them) and its libraries an object, if there."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SourceError(f"{where}: provenance: an object (what the server answered), or "
                          "null")
    if not isinstance(value.get("fingerprint"), str | None):
        raise SourceError(f"{where}: provenance.fingerprint: a string (a digest), or null")
    if not isinstance(value.get("libraries"), dict | None):
        raise SourceError(f"{where}: provenance.libraries: an object (name: version), or "
                          "null")
    return value


TABLE_BATCH = 1024  # rows decoded at a time: a table's encoded size says little of its rows'


def _table(file: Path) -> Iterator[Stored]:
    """The rows of a TRL completions table, read a batch of rows at a time: a small file
    of repeated values can decode to gigabytes at once."""
    table = _parquet().ParquetFile(file)
    columns = table.schema_arrow.names
    rewards = [c[: -len(ITEM)] for c in columns if c.endswith(ITEM)]
    if not rewards:
        raise SourceError(f"{file.name}: no '<reward>/item' column: TRL logs the items with "
                          "the rewards only when the reward function is reward_server's "
                          "ServerReward (reward_server.adapters.trl)")
    for column in (*rewards, "completion"):
        if column not in columns:
            raise SourceError(f"{file.name}: no {column!r} column")
    row = 0
    for batch in table.iter_batches(batch_size=TABLE_BATCH):
        for values in batch.to_pylist():
            yield from _row(file, row, values, rewards)
            row += 1


def _row(file: Path, row: int, values: dict[str, Any], rewards: list[str]) -> Iterator[Stored]:
    for name in rewards:
        if values[name + ITEM] is None:
            continue  # a row that made no item (its columns did not fit one)
        where = f"{file.name}:{row}:{name}"
        item = _loads(values[name + ITEM], where)
        if not isinstance(item, dict):
            raise SourceError(f"{where}: {name}{ITEM}: an object (the item as sent)")
        item = {**item, "response": completion_text(_plain(values["completion"]))}
        status = values.get(name + STATUS)
        result = {"verifier": item.get("verifier")} | ({"status": status} if status else {})
        provenance = values.get(name + PROVENANCE)
        yield Stored(where, item, _reward(values[name], where), result,
                     _provenance(_loads(provenance, where), where) if provenance else None,
                     _int(values.get("step"), where))


def _parquet() -> Any:
    """pyarrow's parquet reader (not a dependency of the server alone; 14.0.1 or later:
    older ones run code a hostile parquet file carries, CVE-2023-47248)."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise SourceError("reading TRL's parquet tables needs pyarrow: pip install "
                          "'pyarrow>=14.0.1'") from None
    major, minor, patch = (int(x) for x in pyarrow.__version__.split(".")[:3])
    if (major, minor, patch) < (14, 0, 1):
        raise SourceError(f"pyarrow {pyarrow.__version__} runs code a hostile parquet file "
                          "carries (CVE-2023-47248): pip install 'pyarrow>=14.0.1'")
    return pyarrow.parquet


def _plain(value: Any) -> Any:
    """A parquet value as JSON had it: a conversation comes back as an array of dicts."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _loads(text: Any, where: str) -> Any:
    if not isinstance(text, str | bytes):
        raise SourceError(f"{where}: not JSON: {str(text)[:80]!r}")
    return parse(text.encode() if isinstance(text, str) else text, where)


def _reward(value: Any, where: str) -> float | None:
    """A stored reward: a finite number, or none (null: unscorable or never logged; TRL logs
    an unscorable reward as NaN)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SourceError(f"{where}: reward: a number, or null")
    try:
        value = float(value)
    except OverflowError:  # an integer of hundreds of digits
        value = math.inf
    if math.isnan(value):
        return None
    if math.isinf(value):
        raise SourceError(f"{where}: reward: a finite number, or null")
    return value


def _int(value: Any, where: str) -> int | None:
    """A stored step: an integer (3.0 too), or none."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SourceError(f"{where}: step: an integer, or null")
    return value
