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
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reward_server.adapters.items import completion_text
from reward_server.rollout_log import FILE

METRICS = "metrics.jsonl"  # our trainer's per-step means: no completion in it
ITEM, STATUS, PROVENANCE = "/item", "/status", "/provenance"  # ServerReward's columns


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
    """The files ``path`` stands for, in reading order."""
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory")
    if path.is_file():
        return [path]
    logs = sorted([*path.glob(FILE), *path.glob("rollouts-rank*.jsonl")])
    tables = sorted(path.glob("completions/*.parquet")) or sorted(path.glob("*.parquet"))
    if logs or tables:
        return logs or tables
    if (path / METRICS).exists():
        raise SourceError(f"{path}: {METRICS} holds per-step means, no completions; run the "
                          f"trainer with log_rollouts: true to keep {FILE}")
    raise SourceError(f"{path}: no {FILE} and no TRL completions/*.parquet in it")


def read(path: Path) -> Iterator[Stored]:
    for file in files_of(path):
        if file.suffix == ".parquet":
            yield from _table(file)
        else:
            yield from _log(file)


def count(path: Path) -> int:
    """How many records ``read`` yields, cheaply (lines; a table's rows by its metadata)."""
    total = 0
    for file in files_of(path):
        if file.suffix == ".parquet":
            meta = _parquet().ParquetFile(file)
            columns = [n for n in meta.schema_arrow.names if n.endswith(ITEM)]
            total += meta.metadata.num_rows * len(columns)
        else:
            with open(file, "rb") as f:
                total += sum(1 for line in f if line.strip())
    return total


def _log(file: Path) -> Iterator[Stored]:
    with open(file, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{file.name}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceError(f"{where}: not JSON ({exc.msg})") from None
            yield _record(record, where)


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
    return Stored(where, item, _reward(record.get("reward")), result,
                  _provenance(record.get("provenance"), where), _int(record.get("step")))


def _provenance(value: Any, where: str) -> dict[str, Any] | None:
    """A stored provenance block: an object (the summary compares its fields), or none."""
    if value is not None and not isinstance(value, dict):
        raise SourceError(f"{where}: provenance: an object (what the server answered), or "
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
        yield Stored(where, item, _reward(values[name]), result,
                     _provenance(_loads(provenance, where), where) if provenance else None,
                     _int(values.get("step")))


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
    try:
        return json.loads(text)
    except (TypeError, json.JSONDecodeError):
        raise SourceError(f"{where}: not JSON: {str(text)[:80]!r}") from None


def _reward(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):  # null: unscorable (or never logged)
        return None
    return None if math.isnan(value) else value  # TRL logs an unscorable reward as NaN


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
