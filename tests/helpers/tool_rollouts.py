"""What the code tool's rollout tests share: the transcript a tiny model is taught (a fenced
call, the sandbox's answer to it, the final answer), and a rollout read back as its turns."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from trainer.rollout import Rollout

CALL = "```python\nprint(6*7)\n```"
OUTPUT = "\n```output\n42\n```\n"  # what the sandbox's answer to CALL becomes
ANSWER = "42<|im_end|>"


def segments(rollout: Rollout, tokenizer: PreTrainedTokenizerBase, row: int) -> list[str]:
    """The row's completion as alternating runs of policy and tool tokens."""
    assert rollout.tool_mask is not None
    ids = rollout.completion_ids[row][rollout.completion_mask[row].bool()].tolist()
    mask = rollout.tool_mask[row][: len(ids)].tolist()
    runs: list[list[int]] = []
    for i, (token, m) in enumerate(zip(ids, mask, strict=True)):
        if i == 0 or m != mask[i - 1]:
            runs.append([])
        runs[-1].append(token)
    return [tokenizer.decode(r) for r in runs]
