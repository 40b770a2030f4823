"""The server's own settings (``ServerSettings``): what every part of the server reads, the
verifiers included (``Verifier.settings``).

A module of its own, below the verifiers: ``reward_server.settings`` composes these with
each installed verifier's section, so it imports the verifiers, and they import this. One
class in one module each way keeps the imports going one way (settings -> registry -> base ->
server_settings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, SecretBytes, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="REWARD_SERVER_", env_file=".env", extra="ignore", cli_kebab_case=True
    )
    sections: ClassVar[dict[str, type[BaseModel]]] = {}  # prefix -> model, set by compose

    host: str = Field("127.0.0.1", description="Interface to bind; 0.0.0.0 in a container.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port.")
    workers: int = Field(
        1, ge=1, description="uvicorn worker processes; each owns its own verifier pools."
    )
    worker_routing: Literal["caller", "any"] = Field(
        "caller", description="With workers: 'caller' sends every connection from one "
        "address (IPv6: one /64) to the same process, so its caps, fair share and sessions "
        "are whole there; 'any' lets the kernel spread them (one client host's burst over "
        "every process).")
    max_connections: int = Field(
        0, ge=0, description="Connections one server process keeps open; past it, the idle "
        "connection held longest by the address with the most idle ones is closed for the "
        "new one (a 503 only when none is idle). 0: the descriptor limit (raised to its "
        "hard limit) less an eighth, at least 512, kept for the server's own work.")
    listen_backlog: int = Field(
        4096, ge=1, description="Connections the kernel queues before the server accepts "
        "them (capped by net.core.somaxconn). A rollout fleet's burst past it has its "
        "connections retried a second later (TCP), and a health probe among them too.")
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = Field(
        "info", description="uvicorn log level.")
    forwarded_allow_ips: str = Field(
        "", description="Proxies whose X-Forwarded-For names the client (comma-separated "
        "addresses, or '*'), as uvicorn's --forwarded-allow-ips. Without tokens the fair "
        "gates and sessions know a caller by its address, so a client must not name itself: "
        "'' trusts no one (the peer's address is the caller); the compose stack sets its nginx.")
    # Tokens make a caller its credential (reward_server/callers.py): with any configured,
    # every route but /healthz needs one, and the caller is the token's name, not the address.
    api_token: SecretStr | None = Field(
        None, description="One token, whose caller is named 'default': every route but "
        "/healthz then needs 'Authorization: Bearer <token>', or HTTP Basic with the token as "
        "the password (veRL's SandboxFusion client sends only a URL: "
        "http://user:<token>@host/run_code). Give it as REWARD_SERVER_API_TOKEN or in "
        "api_tokens_file, not as the flag: a flag is in /proc/<pid>/cmdline for every local "
        "user to read.")
    api_tokens_file: Path | None = Field(
        None, description="A file of 'name:token' lines, one token per caller (a team, a "
        "trainer; '#' starts a comment), read at start: each name is a caller of its own to "
        "the fair gates and the session caps, whatever its address, and what logs and metrics "
        "show (never the token). Keep it owner-only (chmod 600). With api_token as well, "
        "both are accepted.")

    # Browsers on the server's machine (reward_server/browser_guard.py): a web page can make
    # its name resolve to 127.0.0.1 (DNS rebinding), or open a WebSocket to any origin, and
    # speak for the loopback caller; trainers and their libraries send neither header so.
    allowed_hosts: str = Field(
        "", description="Host header names a request may carry (comma-separated; '*': any). "
        "An IP address or a one-label name (localhost, a compose service) is always served. "
        "'': bound to loopback, only those and *.localhost, so a page whose name rebinds to "
        "127.0.0.1 is refused (403); bound to another interface, any.")
    allowed_origins: str = Field(
        "", description="Origins a browser's request may come from (comma-separated "
        "'scheme://host[:port]'; '*': any): a request with an Origin header from anywhere "
        "else than the server's own address gets 403, a WebSocket's handshake too.")

    # Request limits: each answered with 413 naming the limit, never a 500 or an OOM.
    max_items_per_request: int = Field(8192, ge=1, description="Items in one request.")
    max_field_bytes: int = Field(
        2 * 1024 * 1024, ge=1, description="UTF-8 bytes in any one string field of an item."
    )
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1, description="Bytes in a request body.")
    # A body is parsed in one C call that holds the interpreter lock, on a thread or not, at
    # ~0.1 us a number and ~0.8 us a key: what its bytes cannot bound, its count of arrays,
    # objects, values and keys outside strings does (json_shape.py, as the body arrives;
    # a string is one value, however many commas its prose holds). At the default, the
    # worst shape (an object of 512 Ki keys) holds the loop ~0.25 s.
    max_json_containers: int = Field(
        1024 * 1024, ge=1, description="Arrays and objects in a request body, outside "
        "strings: more is a 413 naming the limit; split the batch.")
    max_json_values: int = Field(
        1024 * 1024, ge=1, description="Arrays, objects, values and keys in a request body "
        "(a string is one, whatever it holds): more is a 413 naming the limit; split the "
        "batch (the client library halves it).")
    # What bytes and counts do not bound: past Python's recursion limit (1000) the parser
    # fails with Python's own text, and past 4300 digits Python refuses an integer with its
    # own; an integer's parse grows with the square of its digits (~4 us at 1000, 38 us at
    # 4299). 512 deep holds a batch's item with a code test's value 500 deep (refused per
    # item, at the code verifier's 64); a factorial of 450 fits in 1000 characters.
    max_json_depth: int = Field(
        512, ge=1, le=900, description="How deep arrays and objects may nest in a request "
        "body (the OpenEnv environments' have their own): deeper is a 413 naming the limit.")
    max_json_number_chars: int = Field(
        1000, ge=1, le=4300, description="Characters in one number of a request body (the "
        "OpenEnv environments' have their own): longer is a 413 naming the limit.")

    # What one caller, and the server, may have in flight at once (reward_server/quotas.py):
    # past a cap a request is answered 429 at once, Retry-After from the queue's drain rate.
    # The defaults let one trainer hold a rollout fleet's worth (16,000 one-item requests);
    # a shared server lowers them per its callers.
    max_requests_per_caller: int = Field(
        20_000, ge=0, description="Requests one caller (a token's name, or an address's "
        "quota: all of loopback is one) may have in flight; past it: 429 with Retry-After. "
        "0: no cap.")
    max_items_per_caller: int = Field(
        100_000, ge=0, description="Items one caller may have in flight (taken, not yet "
        "answered); past it: 429 with Retry-After; one request of more: 413. 0: no cap.")
    max_items_in_flight: int = Field(
        400_000, ge=0, description="Items the whole server may have in flight; past it: 429 "
        "with Retry-After from the server's drain rate. 0: no cap.")
    max_body_bytes_per_caller: int = Field(
        512 * 1024 * 1024, ge=0, description="Bytes of request bodies one caller's requests "
        "may hold in memory at once (from the first byte to the answer); past it: 429 with "
        "Retry-After. Without it a caller could hold max_requests_per_caller bodies of "
        "max_body_bytes each. An OpenEnv connection holds its largest message (6 x "
        "max_field_bytes + 64 KiB) while open, and the message in hand. 0: no cap.")
    max_body_bytes_in_flight: int = Field(
        2 * 1024 * 1024 * 1024, ge=0, description="Bytes of request bodies the whole server "
        "may hold in memory at once (OpenEnv connections counted as for "
        "max_body_bytes_per_caller); past it: 429 with Retry-After. 0: no cap.")

    max_sandbox_json_values: int = Field(
        256 * 1024, ge=1, description="JSON values and keys in a /run_code, /run_jupyter, "
        "/v1/sessions or code environment body or message: a files map of millions of "
        "entries held the event loop for 11-15 s before it was refused. More is a 413 "
        "(or a close, 1009) naming the limit.")

    cache_size: int = Field(
        100_000, ge=0, description="Entries in the per-process result cache; 0 turns it off."
    )

    # OpenEnv environments (docs/environments.md): a connection is an episode. What it holds
    # besides (an interpreter's container, scoring) is capped by the session caps and the
    # quotas; these cap the connections themselves, each a socket and an environment. A
    # trainer opens one per rollout in flight: 64 covers a generation batch.
    openenv_max_per_caller: int = Field(
        64, ge=1, description="OpenEnv environments one caller may hold connected at once "
        "(its token's name, or its address's quota). Past it the handshake is refused: 429.")
    openenv_max_open: int = Field(
        1024, ge=1, description="OpenEnv environments connected at once on this server "
        "process. Past it: 429.")
    openenv_idle_s: float = Field(
        300.0, gt=0, le=86400, description="An OpenEnv connection that sends nothing for "
        "this long is closed (code 1001) and its environment ended, its interpreter too.")
    # What an environment's message or body holds besides its values' count: no action
    # nests deep or carries a long number, and past Python's own limits (its recursion limit;
    # 4300 digits, whose parse grows with their square) the parser's error is Python's text.
    # 100 deep holds a reset's item with a code test's value 64 deep (the code verifier's
    # limit); every reasoning-gym task's entry writes numbers of 23 characters at most.
    openenv_max_json_depth: int = Field(
        100, ge=1, le=500, description="How deep arrays and objects may nest in an OpenEnv "
        "message or /reset, /step body: deeper is a close (1009), or a 413, naming it.")
    openenv_max_json_number_chars: int = Field(
        100, ge=1, le=1000, description="Characters in one number of an OpenEnv message or "
        "/reset, /step body: longer is a close (1009), or a 413, naming it. Raise it for "
        "items that carry longer numbers (a code test's big integer).")

    # Fair scheduling: one slow batch never stalls everyone else's rewards. The budget counts
    # only time a request's caller is shut out by other callers (fair_queue): what its own
    # slow items cost is never cut, or slowness would buy a null where a fast wrong answer
    # gets 0. 60 s answers a request starved by others well inside the client's 120 s timeout.
    request_budget_s: float = Field(
        60.0, ge=0, description="Seconds a request's items may wait while other callers' items "
        "hold every worker; items still waiting then come back 'not_run' (score null: they "
        "never ran). Time spent on the caller's own items does not count. 0: no budget.",
    )
    drain_s: float = Field(
        20.0, ge=0, description="Seconds a stopping server (SIGTERM) gives the items already "
        "running to finish; items still waiting for a worker are answered 503 at once "
        "(another replica can run them), and what still runs at the deadline is cancelled. "
        "Below Kubernetes' 30 s grace period by default.",
    )
    timeout_memory_s: float = Field(
        600.0, ge=0, description="Seconds an item that timed out is remembered, so copies of "
        "it come back 'timeout' without running again. Only what load cannot cause is "
        "believed at once (a math check that used 90% of its limit in CPU time, or ran out of "
        "memory); any other timeout on its second occurrence. 0: off.",
    )
    check_workers: int = Field(
        2, ge=1, description="Worker processes per plug-in verifier that supplies a check "
        "(reward_server/pipeline.py), unless the verifier names its own number: its items "
        "run there, this many at a time, shared fairly between callers.")

    # The workers run libraries on a policy's text; what they may reach is reward_server.
    # worker_isolation's docstring. "off" only where every caller and completion is trusted.
    worker_isolation: Literal["on", "off"] = Field(
        "on", description="Scoring workers (math, ifeval, format, reasoning_gym, plug-in "
        "checks) are confined: files read-only and only where their code comes from, no "
        "network, no signal to another process, neither the server's environment nor its "
        "memory; a uid of their own when the server is root. 'off': they run as the server's "
        "user; a trusted setup only.")

    plugins: list[str] = Field(
        default_factory=list,
        description="Extra verifier classes as 'module:Class', besides installed entry points.",
    )

    def section(self, prefix: str) -> BaseModel:
        """A verifier's settings section, validated from this object's flattened fields."""
        model = self.sections.get(prefix)
        if model is None:
            raise KeyError(f"no settings section {prefix!r} in {type(self).__name__} "
                           f"(sections: {', '.join(sorted(self.sections)) or 'none'})")
        return model.model_validate(
            {name: getattr(self, f"{prefix}_{name}") for name in model.model_fields})

    def dump_secret(self) -> dict[str, Any]:
        """Every field as JSON data, secrets in clear (at any depth, a plug-in's included):
        for the worker processes' file only."""
        return {name: _revealed(getattr(self, name)) for name in type(self).model_fields}


def _revealed(value: Any) -> Any:
    """JSON data of a settings value, with every secret's value in clear."""
    if isinstance(value, SecretStr | SecretBytes):
        secret = value.get_secret_value()
        return secret.decode() if isinstance(secret, bytes) else secret
    if isinstance(value, BaseModel):
        return {name: _revealed(getattr(value, name)) for name in type(value).model_fields}
    if isinstance(value, dict):
        return {str(k): _revealed(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_revealed(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.loads(json.dumps(value, default=str))  # paths, enums: their text
