"""Builds the FastAPI app. The lifespan owns the sandbox service (its Docker clients and
containers, handed to the verifiers, /run_code and the sessions) and every verifier's
resources (process pools); nothing starts at import time."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from reward_server import __version__, worker_isolation
from reward_server.browser_guard import BrowserGuard
from reward_server.callers import load_tokens
from reward_server.collector import full_collections
from reward_server.drain import watch_stop_signals
from reward_server.errors import EXCEPTION_HANDLERS
from reward_server.middleware import BearerAuth, BodyLimit, DropOnHangUp, ErrorGuard, RequestMetrics
from reward_server.provenance import Provenances
from reward_server.routes import meta, openrlhf, rewards, run_code, run_jupyter, sessions
from reward_server.routes.verify import verifier_router
from reward_server.run_code.sessions import Sessions
from reward_server.sandbox_service import SandboxService
from reward_server.scoring import Scorer
from reward_server.settings import ServerSettings, get_settings
from reward_server.turnstile import Turnstile
from reward_server.verifiers.base import Verifier
from reward_server.verifiers.registry import discover

log = logging.getLogger("reward_server")


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    settings = settings or get_settings()
    classes = discover(settings.plugins)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker_isolation.configure(settings.worker_isolation == "on")
        worker_isolation.protect_server()
        sandbox = app.state.sandbox = SandboxService.of(settings)
        verifiers = {name: cls(settings) for name, cls in classes.items()}
        # what produced each verdict (source digests, versions: a second of reading files on
        # a loaded machine) is made off the loop while the engine connects and workers start
        provenance = asyncio.ensure_future(asyncio.to_thread(Provenances, verifiers, sandbox))
        started: list[Verifier | Scorer] = []  # each stopped at the end
        try:
            if sandbox is not None:
                await sandbox.start()
            for verifier in verifiers.values():
                verifier.use_sandbox(sandbox)
                await verifier.start()
                started.append(verifier)
            scorer = app.state.scorer = Scorer(verifiers, settings)
            app.state.provenance = await provenance  # once: every response's
            await scorer.start()
            started.append(scorer)
            # a burst's heap is not walked by the cycle collector (collector.py)
            collections = asyncio.create_task(full_collections(lambda: not scorer.quotas.items))
            log.info("verifiers ready: %s", ", ".join(sorted(verifiers)))
            undo_signals = watch_stop_signals()
            try:
                async with Sessions(scorer, sandbox,
                                    app.state.provenance) as app.state.sessions:  # closed first
                    yield
            finally:
                undo_signals()
                collections.cancel()
        finally:
            provenance.cancel()  # a start that failed before it was needed
            await asyncio.gather(*(v.stop() for v in started), return_exceptions=True)
            if sandbox is not None:  # after everything that runs in it
                await asyncio.gather(sandbox.stop(), return_exceptions=True)

    # /docs serves Swagger UI's files from the fastapi-offline package: FastAPI's own page
    # loads them from a CDN and is blank on an offline cluster
    app = FastAPIOffline(
        title="Verifiable Rewards",
        version=__version__,
        description="Scores model completions for RL from verifiable rewards.",
        lifespan=lifespan,
        exception_handlers=EXCEPTION_HANDLERS,
    )
    app.include_router(meta.router)
    app.include_router(rewards.router)
    app.include_router(openrlhf.router)
    app.include_router(run_code.router)
    app.include_router(run_jupyter.router)
    app.include_router(sessions.router)
    for name, cls in sorted(classes.items()):
        app.include_router(verifier_router(name, cls))
    _mount_environments(app, settings)

    # outermost last: metrics see every response, auth runs before the body is read, the
    # turnstile orders who starts, and the hang-up watch reads what comes after the body
    # BodyLimit has read
    app.add_middleware(DropOnHangUp)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes,
                       max_containers=settings.max_json_containers,
                       max_values=settings.max_json_values,
                       sandbox_max_values=settings.max_sandbox_json_values,
                       json_limits=(settings.max_json_depth,
                                    settings.max_json_number_chars),
                       environment_limits=(settings.openenv_max_json_depth,
                                           settings.openenv_max_json_number_chars))
    # who starts on the loop: inside the token check (the caller is known), before the body
    app.add_middleware(Turnstile)
    tokens = load_tokens(settings)
    if tokens:
        app.add_middleware(BearerAuth, tokens=tokens)
    # a browser's requests for a site not allowed: refused before a token or a body is read
    app.add_middleware(BrowserGuard, bound=settings.host, allowed_hosts=settings.allowed_hosts,
                       allowed_origins=settings.allowed_origins)
    known = {"/healthz", "/metrics", "/v1/verifiers", "/v1/rewards", "/get_reward", "/docs",
             "/redoc", "/openapi.json", "/run_code", "/run_jupyter", "/v1/sessions"}
    app.add_middleware(RequestMetrics, routes=known | {f"/v1/verify/{n}" for n in classes})
    app.add_middleware(ErrorGuard)  # a JSON 500 with a request id for anything that escapes
    return app


def _mount_environments(app: FastAPI, settings: ServerSettings) -> None:
    """The OpenEnv environments (reward_server/environments), where the ``openenv`` extra is
    installed."""
    if importlib.util.find_spec("openenv") is None:  # an optional extra: the server runs without
        log.info("OpenEnv environments not served: pip install 'verifiable-rewards[openenv]'")
        return
    from reward_server.environments.mount import mount_environments

    mount_environments(app, settings)
