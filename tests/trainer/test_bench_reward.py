"""The benches' reward is the demo's: the server's math verifier's reading, which pays no
completion the length limit cut, and the trainer hands a local function the cut flags."""

from bench.bench_trainer import reward_demo, reward_last_number, truncated_ids
from trainer.rewards import FunctionScorer

ROW = {"answer": 83}


def test_a_cut_completion_is_not_paid_though_its_last_number_is_the_answer() -> None:
    cut = "33 + 50 = 83\n\nYour answer must contain"  # drawn by a policy that never stops
    assert reward_last_number([cut], [ROW]) == [1.0]  # what the races paid before
    assert reward_demo([cut], [ROW], [True]) == [0.0]
    assert reward_demo([cut], [ROW], [False]) == [0.0]  # stopped mid-sentence: no answer


def test_a_completion_that_stops_after_its_answer_is_paid() -> None:
    texts = ["33 + 50 = 83\n", "The answer is 83.", "83", "33 + 50 = 84\n"]
    assert reward_demo(texts, [ROW] * 4, [False] * 4) == [1.0, 1.0, 1.0, 0.0]
    chat = [[{"role": "assistant", "content": "83"}]]  # TRL's conversational completions
    assert reward_demo(chat, [ROW], [False]) == [1.0]


def test_trls_completion_ids_without_an_eos_read_as_cut() -> None:
    assert truncated_ids([[5, 6, 2], [5, 6, 7]], eos_id=2) == [False, True]


def test_a_function_that_takes_the_cut_flags_gets_them_from_the_trainer() -> None:
    seen = []

    def fn(texts: list[str], rows: list[dict], truncated: list[bool]) -> list[float]:
        seen.append(truncated)
        return reward_demo(texts, rows, truncated)

    scorer = FunctionScorer(fn)
    scored = scorer.score(["83", "83"], [ROW, ROW], truncated=[False, True])
    assert seen == [[False, True]] and scored.rewards == [1.0, 0.0]
    assert FunctionScorer(lambda t, r: [1.0] * len(t)).score(["x"], [ROW], 1, [True]).rewards \
        == [1.0]  # TRL's two-argument functions are called as before
    scorer.close()


def test_no_completion_buys_a_null() -> None:
    """Whatever the policy writes, the demo's reward is a number: a null would drop the
    completion from its group's advantage, which a policy could learn to reach for."""
    hostile = ["", "\x00" * 50, "[" * 5000, "9" * 5000, "83" * 3000, "\\boxed{", "٨٣",
               "NaN", "inf", "83\n" + "x" * 100_000]
    for cut in (False, True):
        scores = reward_demo(hostile, [ROW] * len(hostile), [cut] * len(hostile))
        assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores), scores
