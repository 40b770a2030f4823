"""Rollout engines beside HF ``generate``: vLLM in a process of its own (``client``), fed
the policy's weights after each update (``weights``). Nothing here is imported unless
``rollout_engine`` asks for it."""
