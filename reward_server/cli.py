"""``reward-server``: run the HTTP service.

Every setting is a flag (``--math-timeout-s 5``), an environment variable
(``REWARD_SERVER_MATH_TIMEOUT_S=5``) or a line in ``.env``; flags win. ``--help`` lists all,
each verifier's section included (``--sandbox-pool-size``); ``docs/settings.md`` too.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from pydantic import ValidationError
from pydantic_settings import CliApp, SettingsError

from reward_server.callers import load_tokens
from reward_server.environments.gate import max_message_bytes
from reward_server.settings import SETTINGS_FILE_ENV, ServerSettings, settings_class
from reward_server.verifiers.registry import PluginError


def _parse(args: list[str]) -> ServerSettings:
    """Two passes: the server's own settings name the plug-ins, whose sections the full
    class (and ``--help``) then includes."""
    first = [a for a in args if a not in ("-h", "--help")]
    core = ServerSettings(_cli_parse_args=first, _cli_ignore_unknown_args=True)
    return CliApp.run(settings_class(core.plugins), cli_args=args, cli_settings_source=None)


def _settings_file(settings: ServerSettings) -> str:
    """The settings as one JSON file for the worker processes (owner-only: the token)."""
    fd, path = tempfile.mkstemp(prefix="reward-server-settings-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(settings.dump_secret(), f)
    return path


def main(argv: list[str] | None = None) -> None:
    try:
        settings = _parse(sys.argv[1:] if argv is None else argv)
        load_tokens(settings)  # a malformed tokens file stops here, in one line
    except (ValidationError, SettingsError) as exc:
        first = str(exc).strip().splitlines()
        print(f"reward-server: invalid settings: {' '.join(first[:3])}", file=sys.stderr)
        raise SystemExit(2) from None
    except (PluginError, ValueError) as exc:  # in one line, not in each worker
        print(f"reward-server: {exc}", file=sys.stderr)
        raise SystemExit(2) from None

    from reward_server.listener import serve

    # without tokens a caller is its address: X-Forwarded-For only from trusted proxies
    serving = {"proxy_headers": bool(settings.forwarded_allow_ips),
               "forwarded_allow_ips": settings.forwarded_allow_ips or None,
               # a bounded drain (reward_server/drain.py): what runs at the deadline is cut
               "timeout_graceful_shutdown": settings.drain_s,
               "backlog": settings.listen_backlog,
               "max_connections": settings.max_connections,
               # the environments' messages (gate.py): the library refuses one past their
               # limit from its frame's header, before buffering it (what it reads ahead of
               # the app is what a connection holds of its caller's bytes), and no
               # compression, so a message costs what it holds on the wire
               "ws_max_size": max_message_bytes(settings),
               "ws_per_message_deflate": False}
    if settings.workers > 1:
        path = os.environ[SETTINGS_FILE_ENV] = _settings_file(settings)
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="reward-prom-"))
        try:
            serve(
                "reward_server.app:create_app", factory=True, host=settings.host,
                port=settings.port, workers=settings.workers, log_level=settings.log_level,
                route_by_caller=settings.worker_routing == "caller", **serving,
            )
        finally:
            os.unlink(path)  # it holds the token in clear
    else:
        from reward_server.app import create_app

        serve(create_app(settings), host=settings.host, port=settings.port,
              log_level=settings.log_level, **serving)


if __name__ == "__main__":
    main()
