"""``reward-server``: run the HTTP service.

Every setting is a flag (``--math-timeout-s 5``), an environment variable
(``REWARD_SERVER_MATH_TIMEOUT_S=5``) or a line in ``.env``; flags win. ``--help`` lists all.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from pydantic import SecretStr, ValidationError
from pydantic_settings import CliApp, SettingsError

from reward_server.settings import Settings


def _export(settings: Settings) -> None:
    """uvicorn's worker processes read settings from the environment: hand them ours."""
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        text = json.dumps(value) if isinstance(value, list) else str(value)
        os.environ[f"REWARD_SERVER_{name.upper()}"] = text


def main(argv: list[str] | None = None) -> None:
    try:
        settings = CliApp.run(
            Settings, cli_args=sys.argv[1:] if argv is None else argv,
            cli_settings_source=None,
        )
    except (ValidationError, SettingsError) as exc:
        first = str(exc).strip().splitlines()
        print(f"reward-server: invalid settings: {' '.join(first[:3])}", file=sys.stderr)
        raise SystemExit(2) from None

    import uvicorn

    from reward_server.settings import get_settings
    from reward_server.verifiers.registry import PluginError, discover

    try:
        discover(settings.plugins)  # fail here, in one line, not in each worker
    except PluginError as exc:
        print(f"reward-server: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    _export(settings)
    get_settings.cache_clear()
    if settings.workers > 1:
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="reward-prom-"))
        uvicorn.run(
            "reward_server.app:create_app", factory=True, host=settings.host,
            port=settings.port, workers=settings.workers, log_level=settings.log_level,
        )
    else:
        from reward_server.app import create_app

        uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                    log_level=settings.log_level)


if __name__ == "__main__":
    main()
