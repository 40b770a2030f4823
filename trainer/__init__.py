"""GRPO trainer: group rollouts scored by the reward server, the GRPO update and variants."""
