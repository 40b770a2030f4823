"""Items that the server tests send: a correct code item, one that holds its container, math
items that each run into the time limit, a batch of math items with known rewards."""

from __future__ import annotations

# A correct assertion item.
ADD = {"response": "```python\ndef add(a, b):\n    return a + b\n```",
       "test_list": ["assert add(2, 3) == 5"]}
# A program that holds its container 50 s (for a server whose max time limit allows it).
SLEEPER = {"response": "```python\nimport time\ntime.sleep(50)\n```",
           "tests": [{"input": "", "output": "never"}], "time_limit_s": 55, "budget_s": 58}


def towers(n: int) -> list[dict[str, str]]:
    """Distinct towers of exponents: each runs into the time limit."""
    return [{"response": f"\\boxed{{{3 + k % 5}^{{{5 + k % 4}^{{{7 + k // 20}^{{9}}}}}}}}",
             "answer": "3"} for k in range(n)]


def boxed(n: int, answers: int) -> tuple[list[dict[str, str]], list[float]]:
    """``n`` math items for ``/v1/rewards``, ``\\boxed{i}`` against the answer ``i % answers``,
    and their rewards: 1 for the first ``answers`` (the box holds the answer), 0 after."""
    items = [{"verifier": "math", "response": f"\\boxed{{{i}}}", "answer": str(i % answers)}
             for i in range(n)]
    return items, [1.0 if i % answers == i else 0.0 for i in range(n)]
