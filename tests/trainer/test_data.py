"""Datasets and the prompt stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.data import PromptStream, arithmetic_rows, load_rows


def test_arithmetic_set_is_fixed_and_correct() -> None:
    rows = arithmetic_rows(50, seed=3)
    assert rows == arithmetic_rows(50, seed=3)
    for row in rows:
        a, b = (int(x) for x in row["prompt"].split("What is ")[1].split("?")[0].split(" + "))
        assert row["answer"] == str(a + b)
    assert load_rows("arithmetic")[:3] != load_rows("arithmetic-eval")[:3]


def test_stream_shards_over_ranks_and_covers_every_prompt() -> None:
    rows = [{"prompt": str(i)} for i in range(12)]
    ranks = [PromptStream(rows, seed=1, rank=r, world=3) for r in range(3)]
    seen = [p["prompt"] for s in ranks for p in s.take(4)]
    assert sorted(seen, key=int) == [str(i) for i in range(12)]  # one epoch, no overlap
    assert all(s.position == 12 for s in ranks)


def test_stream_state_resumes_the_same_order() -> None:
    rows = [{"prompt": str(i)} for i in range(7)]
    a = PromptStream(rows, seed=5)
    a.take(10)
    b = PromptStream(rows, seed=5)
    b.load_state(a.state())
    assert a.take(6) == b.take(6)


def test_load_rows_sources_and_errors(tmp_path: Path) -> None:
    assert load_rows([{"prompt": "x", "answer": "1"}]) == [{"prompt": "x", "answer": "1"}]

    class FakeDataset(list):  # what matters of a datasets.Dataset
        column_names = ["prompt"]

    assert load_rows(FakeDataset([{"prompt": "y"}])) == [{"prompt": "y"}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not JSON"):
        load_rows(str(bad))
    with pytest.raises(ValueError, match="no 'prompt' column"):
        load_rows([{"question": "x"}])
    with pytest.raises(ValueError, match="empty"):
        load_rows([])
