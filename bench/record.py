"""Benchmark results as data: every bench writes its figures with when, on what code and on
what machine they were measured. The run's file goes to ``bench/results/`` (not committed:
each run's own); ``--publish`` also writes ``docs/benchmarks/<name>.json``, the latest
figures that ``docs/benchmarks.md`` shows."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "docs" / "benchmarks"


def commit() -> str:
    """The code's commit (``+changes`` when the tree differs): take it when the bench starts,
    since the tree may change while a long one runs."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                             capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, text=True, capture_output=True).stdout.strip()
        return out + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "memory_gb": _memory_gb(),
            "load_average_at_end": [round(x, 2) for x in load]}


def _memory_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
        return round(kb / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        return None


def record(name: str, figures: dict[str, Any], settings: dict[str, Any],
           publish: bool = False, measured_on: str | None = None) -> Path:
    """Write ``{date, commit, machine, settings, figures}``; returns the run's file.
    ``measured_on``: the commit when the bench started (default: now)."""
    now = datetime.datetime.now(datetime.UTC)
    data = {"bench": name, "date": now.isoformat(timespec="seconds"),
            "commit": measured_on or commit(),
            "machine": machine(), "settings": settings, "figures": figures}
    text = json.dumps(data, indent=2) + "\n"
    path = ROOT / "bench" / "results" / f"{name}-{now:%Y%m%dT%H%M%S}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if publish:
        PUBLISHED.mkdir(parents=True, exist_ok=True)
        (PUBLISHED / f"{name}.json").write_text(text)
    return path
