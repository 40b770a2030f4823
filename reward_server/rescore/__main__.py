"""``python -m reward_server.rescore``: the ``reward-rescore`` command."""

from reward_server.rescore.cli import main

main()
