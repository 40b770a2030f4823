"""The reasoning_gym verifier's pure functions: answer extraction, chunking."""

from __future__ import annotations

import pytest

from reward_server.verifiers.reasoning_gym.answers import answer_of, last_number
from reward_server.verifiers.reasoning_gym.verifier import chunk_size


@pytest.mark.parametrize(("text", "number"), [
    ("4 + 1 = 5.", "5"),             # a full stop is not a decimal point
    ("The answer is -12", "-12"),
    ("3-4", "4"),                    # a minus between digits is not the number's sign
    ("After 3 steps, 1,250 left", "1250"),
    ("half: 2.5.", "2.5"),
    ("12,34", "34"),                 # not a thousands group: two numbers
    ("no digits", None),
])
def test_last_number_is_the_number_as_written(text: str, number: str | None) -> None:
    assert last_number(text) == number


def test_last_number_reads_after_the_reasoning_only() -> None:
    assert answer_of("<think>7</think> so 8", "last_number", "strip") == "8"
    assert answer_of("<think>7 and 8", "last_number", "strip") is None  # cut off thinking
    assert answer_of("<think>7 and 8", "last_number", "keep") == "8"


def test_last_number_on_megabytes_of_digits_and_commas() -> None:
    assert last_number("1" + ",000" * 250_000 + " then 9") == "9"
    assert last_number("9" * 2_000_000) == "9" * 2_000_000


@pytest.mark.parametrize(("jobs", "workers", "most", "size"), [
    (256, 1, 256, 256),   # one worker: one hand-off
    (256, 2, 256, 128),   # two: half each, on two cores
    (257, 2, 256, 129),
    (1000, 2, 256, 256),  # never more than chunk_items at once
    (3, 8, 256, 1),
    (0, 2, 256, 1),
])
def test_a_requests_answers_spread_over_the_workers(jobs: int, workers: int, most: int,
                                                    size: int) -> None:
    assert chunk_size(jobs, workers, most) == size


def test_the_task_list_and_the_images_pin_are_the_pinned_librarys() -> None:
    """The server validates ``task`` against its own list (it never imports the library);
    the sandbox image installs the version pyproject.toml's extra pins."""
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    from reward_server.verifiers.reasoning_gym.tasks import LIBRARY_VERSION, TASKS

    pytest.importorskip("reasoning_gym")
    from reasoning_gym.factory import DATASETS

    root = Path(__file__).resolve().parents[4]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["reasoning-gym"]
    image = (root / "sandbox" / "scorers" / "requirements.txt").read_text().splitlines()
    assert extra == [f"reasoning-gym=={LIBRARY_VERSION}"]
    assert f"reasoning_gym=={LIBRARY_VERSION}" in image
    assert version("reasoning-gym") == LIBRARY_VERSION
    assert TASKS == set(DATASETS)
