"""The code verifier's settings section: ``--sandbox-<field>`` / ``REWARD_SERVER_SANDBOX_<FIELD>``
(composed into the server's settings by ``reward_server.settings``), validated here, handed to
the sandbox as a ``SandboxConfig``.

Validators are ``Annotated`` on their fields, so they travel with a field into the composed
settings class and a bad value is refused at start, on the command line, naming the flag."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field
from pydantic_settings import NoDecode

from reward_server.run_code.session_settings import SessionSettings
from sandbox import SandboxConfig
from sandbox.seccomp import security_opt
from sandbox.tls import check_cert_path


def _split_hosts(value: object) -> object:
    if isinstance(value, str):
        return [h.strip() for h in value.split(",") if h.strip()]
    return value


def _readable_profile(value: str) -> str:
    security_opt(value)  # a missing or malformed file stops the start, naming the path
    return value


def _cert_path(value: str | None) -> str | None:
    return check_cert_path(value) if value else None  # a missing file stops the start


class SandboxSettings(SessionSettings):
    """See ``sandbox.config.SandboxConfig`` for each field (``SessionSettings`` for the
    sessions')."""

    image: str = Field(SandboxConfig.image,
                       description="The sandbox image (built by sandbox/build_image.sh).")
    docker_host: str | None = Field(None, description="One Docker engine; unset: DOCKER_HOST "
                                    "or the local socket.")
    docker_hosts: Annotated[list[str], NoDecode, BeforeValidator(_split_hosts)] = Field(
        default_factory=list, description="Several Docker engines, comma-separated "
        "(unix:///var/run/docker.sock,tcp://10.0.0.2:2376): pool_size containers on each.")
    tls_cert_path: Annotated[str | None, AfterValidator(_cert_path)] = Field(None, description=(
        "Directory of ca.pem, cert.pem, key.pem (Docker's DOCKER_CERT_PATH layout): every "
        "engine is reached over TLS with this client certificate and checked against this CA, "
        "so engines can run dockerd --tlsverify; unset: no client certificate."))
    pool_size: int = Field(SandboxConfig.pool_size, ge=1, description="Warm containers per "
                           "engine; executions run in parallel up to this.")
    max_uses: int = Field(SandboxConfig.max_uses, ge=1,
                          description="A container is replaced after this many executions.")
    memory_mb: int = Field(SandboxConfig.memory_mb, ge=64,
                           description="Memory of one container (no swap).")
    cpus: float = Field(SandboxConfig.cpus, gt=0, description="CPUs of one container.")
    pids_limit: int = Field(SandboxConfig.pids_limit, ge=16,
                            description="Processes and threads in one container (runc).")
    default_time_limit_s: float = Field(SandboxConfig.default_time_limit_s, gt=0,
                                        description="Per-test limit when an item sets none.")
    max_time_limit_s: float = Field(SandboxConfig.max_time_limit_s, gt=0,
                                    description="The most per-test time an item can ask for; also "
                                    "the whole run of an assertion item (its tests share "
                                    "one process, in one turn).")
    default_memory_mb: int = Field(SandboxConfig.default_memory_mb, ge=32,
                                   description="Per-program memory when an item sets none.")
    max_memory_mb: int = Field(SandboxConfig.max_memory_mb, ge=32,
                               description="The most per-program memory an item can ask for.")
    output_limit_bytes: int = Field(SandboxConfig.output_limit_bytes, ge=1024, description=(
        "Output one test may write when an item sets none (output_limit past it)."))
    max_output_limit_bytes: int = Field(SandboxConfig.max_output_limit_bytes, ge=1024,
                                        le=256 * 1024 * 1024, description=(
        "The most output per test an item can ask for (output_limit_mb); the harness holds "
        "about 3x this while it compares, in the container's memory."))
    snippet_response_limit_bytes: int = Field(
        SandboxConfig.snippet_response_limit_bytes, ge=64 * 1024, le=32 * 1024 * 1024,
        description=("What one /run_code call sends back: stdout and stderr as JSON text and "
                     "the fetched files' base64, together. Past it streams keep their first "
                     "bytes and files are left out, named in the answer's cut. A session "
                     "request's cells together: past it the cells still to run do not."))
    acquire_timeout_s: float = Field(SandboxConfig.acquire_timeout_s, gt=0, description=(
        "How long an execution may wait for a free container before it is unscorable."))
    item_budget_s: float = Field(SandboxConfig.item_budget_s, gt=0, le=600, description=(
        "Wall-clock budget of one item, compile and all tests: tests it leaves unrun time out."))
    max_item_budget_s: float = Field(SandboxConfig.max_item_budget_s, gt=0, le=3600, description=(
        "The most wall-clock budget an item can ask for (budget_s)."))
    reap_interval_s: float = Field(SandboxConfig.reap_interval_s, gt=0, description=(
        "How often containers of dead server processes are looked for and removed."))
    runtime: str | None = Field(None, description="OCI runtime registered with the engine, "
                                "e.g. runsc (gVisor); unset: the engine's default (runc).")
    seccomp_profile: Annotated[str, AfterValidator(_readable_profile)] = Field(
        "", description="Seccomp profile JSON; unset: sandbox/seccomp.json; engine-default: "
        "the engine's own.")

    def config(self) -> SandboxConfig:
        fields = self.model_dump(exclude=set(SessionSettings.model_fields))
        return SandboxConfig(**{**fields, "docker_hosts": tuple(self.docker_hosts)})
