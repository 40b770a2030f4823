"""Verifiable Rewards: an HTTP service that scores model completions for RL training."""

__version__ = "0.1.0"
