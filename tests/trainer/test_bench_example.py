"""bench/bench_example.py's summary of a run, from a metrics.jsonl the trainer writes."""

from __future__ import annotations

import json
from pathlib import Path

from bench.bench_example import summarise


def test_a_runs_summary(tmp_path: Path) -> None:
    records = [{"step": 0, "eval/accuracy": 0.25, "eval/reward": 0.3}]
    for step in range(1, 13):
        records.append({"step": step, "reward": step / 10, "accuracy": step / 20,
                        "completion_length": 10.0, "time/step": 2.0,
                        "rewards/math/mean": step / 10, "rewards/math/std": 9.0,
                        "tools/call_frequency": 1.0})
    records[-1]["eval/accuracy"] = 0.5
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    got = summarise(tmp_path)
    assert got["steps"] == 12
    assert [e["step"] for e in got["held_out"]] == [0, 12]
    assert (got["held_out_accuracy_before"], got["held_out_accuracy_after"]) == (0.25, 0.5)
    assert got["train"]["reward"] == {"first_steps": 0.3, "last_steps": 1.0}  # steps 1-5, 8-12
    assert "rewards/math/std" not in got["train"] and "tools/call_frequency" in got["train"]
    assert got["mean_step_s"] == 2.0 and len(got["per_step"]) == 12
