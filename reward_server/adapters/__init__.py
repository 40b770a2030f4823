"""Adapters that let other RL trainers score on the reward server.

- ``trl.ServerReward``: a reward function for TRL's ``GRPOTrainer(reward_funcs=[...])``.
- ``verl.compute_score``: veRL's ``custom_reward_function`` (set the URL by environment).
- OpenRLHF needs no client code: point ``--remote_rm_url`` at ``<server>/get_reward``
  (``reward_server/routes/openrlhf.py``).

Each imports nothing of the library it serves; only httpx and the client.
"""
