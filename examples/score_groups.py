"""Score groups of completions through the reward server, as a GRPO trainer does.

For each prompt, G completions go to ``POST /v1/rewards`` in one batch; the group-relative
advantage ``A_i = (r_i - mean(r)) / (std(r) + eps)`` is printed next to each reward, computed
by the trainer's own ``group_advantages``: a null reward is left out of its group's mean and
std and gets A = 0, and std is the unbiased sample std."""

from __future__ import annotations

import argparse
import sys
import time

from reward_server.client import RewardClient, RewardClientError
from trainer.advantages import as_rewards, group_advantages, nan_mean

CODE_TESTS = [{"input": "3 4", "output": "7"}, {"input": "10 -2", "output": "8"}]
CODE_GROUP = [
    "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
    "```python\nprint(sum(map(int, input().split())))\n```",
    "```python\na, b = map(int, input().split())\nprint(a * b)\n```",
    "```python\nprint(7)\n```",
]

# prompt -> (reference, completions). The prompt travels with each completion as the item's
# ``question`` (TRL and veRL hand it to reward functions too): the question's own expression,
# boxed (``(x+1)^2-2x`` for "Simplify (x+1)^2 - 2x"), equals its answer, and only the question
# tells that it is a copy, not an answer.
GROUPS = {
    "Natalia sold clips to 48 friends in April, and half as many in May. How many in all?": (
        "72",
        ["48 + 24 = 72.\n#### 72", "She sold 48/2 = 24 in May.\n#### 24",
         "In total \\boxed{72}", "The answer is 72.", "48 + 48/2 = \\boxed{72}",
         "I am not sure.", "April 48, May 24, total $72$", "#### 96"],
    ),
    "Simplify $(x+1)^2 - 2x$.": (
        "x^2+1",
        ["\\boxed{x^2 + 1}", "\\boxed{1 + x^2}", "\\boxed{x^2+2x+1}", "\\boxed{(x+1)^2-2x}",
         "\\boxed{x^2 - 1}", "\\boxed{x^2+1 \\text{ or } x^2}", "$x^2+1$", "\\boxed{x^{2}+1}"],
    ),
    # a reasoning model: only what follows </think> is its answer; a hedge commits to none
    "How many positive divisors does 12 have?": (
        "6",
        ["<think>\n1, 2, 3, 4, 6, 12: that is 6. Or is 12 itself excluded? Then \\boxed{5}."
         "\n</think>\nThe divisors are 1, 2, 3, 4, 6 and 12, so the answer is $\\boxed{6}$.",
         "<think>\n1, 2, 3, 4, 6, 12: \\boxed{6}.\n</think>\nExcluding 12 itself, "
         "the answer is $\\boxed{5}$.",
         "<think>\nThe divisors are 1, 2, 3, 4, 6, 12, so \\boxed{6}. But wait, should",
         "Counting 12 itself there are \\boxed{6}; otherwise \\boxed{5}.",
         "I think it is 5, though 6 would also be defensible.",
         "The answer is not 5 but 6.",
         "Its divisors are 1, 2, 3, 4, 6 and 12.\n\n**Answer: 6**",
         "```python\nprint(len([d for d in range(1, 13) if 12 % d == 0]))  # 6\n```"],
    ),
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--wait-s", type=float, default=60, help="wait this long for the server")
    args = ap.parse_args()

    with RewardClient(args.url, max_attempts=3, backoff_s=0.2) as client:
        deadline = time.monotonic() + args.wait_s
        while True:
            try:
                client.health()
                break
            except RewardClientError:
                if time.monotonic() > deadline:
                    print(f"demo: no reward server answered at {args.url}", file=sys.stderr)
                    return 1
                time.sleep(0.5)
        items = [{"verifier": "math", "response": c, "answer": answer, "question": prompt}
                 for prompt, (answer, completions) in GROUPS.items() for c in completions]
        items += [{"verifier": "code", "response": c, "tests": CODE_TESTS} for c in CODE_GROUP]
        out = client.rewards(items)

    k = 0
    for prompt, (answer, completions) in GROUPS.items():
        rewards = out.rewards[k : k + len(completions)]
        results = out.results[k : k + len(completions)]
        k += len(completions)
        scores = as_rewards(rewards)  # a null is NaN: out of the mean and std, A = 0
        advantages, _ = group_advantages(scores, len(completions))
        print(f"\n{prompt}\n  reference {answer!r}; group mean reward {nan_mean(scores):.2f}")
        for completion, reward, advantage, result in zip(completions, rewards,
                                                         advantages.tolist(), results,
                                                         strict=True):
            shown = completion.replace("\n", " ")[-38:]
            why = f"  ({result['detail']})" if result.get("detail") and not reward else ""
            score = "null" if reward is None else f"{reward:.0f}"
            print(f"  r={score} A={advantage:+.2f}  {result['status']:<10} {shown!r}"
                  f"{why[:64]}")
    print("\nRead two integers, print their sum (2 stdin/stdout tests), run in the sandbox:")
    for completion, reward, result in zip(CODE_GROUP, out.rewards[k:], out.results[k:],
                                          strict=True):
        shown = completion.replace("\n", " ")[10:48]
        score = "null" if reward is None else f"{reward:.1f}"
        print(f"  r={score:<4} {result['status']:<19} {shown!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
