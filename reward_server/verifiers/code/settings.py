"""The code verifier's settings: ``REWARD_SERVER_SANDBOX_*``, validated here, handed to the
sandbox as a ``SandboxConfig``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from sandbox import SandboxConfig
from sandbox.seccomp import security_opt


class SandboxSettings(BaseSettings):
    """``REWARD_SERVER_SANDBOX_<FIELD>``; see ``sandbox.config.SandboxConfig`` for each."""

    model_config = SettingsConfigDict(env_prefix="REWARD_SERVER_SANDBOX_", env_file=".env",
                                      extra="ignore")
    image: str = SandboxConfig.image
    docker_host: str | None = None
    docker_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Several Docker engines, comma-separated "
        "(unix:///var/run/docker.sock,tcp://10.0.0.2:2376): pool_size containers on each.")
    pool_size: int = Field(SandboxConfig.pool_size, ge=1)
    max_uses: int = Field(SandboxConfig.max_uses, ge=1)
    memory_mb: int = Field(SandboxConfig.memory_mb, ge=64)
    cpus: float = Field(SandboxConfig.cpus, gt=0)
    pids_limit: int = Field(SandboxConfig.pids_limit, ge=16)
    default_time_limit_s: float = Field(SandboxConfig.default_time_limit_s, gt=0)
    max_time_limit_s: float = Field(SandboxConfig.max_time_limit_s, gt=0)
    default_memory_mb: int = Field(SandboxConfig.default_memory_mb, ge=32)
    max_memory_mb: int = Field(SandboxConfig.max_memory_mb, ge=32)
    output_limit_bytes: int = Field(SandboxConfig.output_limit_bytes, ge=1024)
    acquire_timeout_s: float = Field(SandboxConfig.acquire_timeout_s, gt=0)
    item_budget_s: float = Field(SandboxConfig.item_budget_s, gt=0, le=600, description=(
        "Wall-clock budget of one item, compile and all tests: tests it leaves unrun time out."))
    reap_interval_s: float = Field(SandboxConfig.reap_interval_s, gt=0)
    runtime: str | None = Field(None, description="OCI runtime registered with the engine, "
                                "e.g. runsc (gVisor); unset: the engine's default (runc).")
    seccomp_profile: str = Field("", description="Seccomp profile JSON; unset: "
                                 "sandbox/seccomp.json; engine-default: the engine's own.")

    @field_validator("docker_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [h.strip() for h in value.split(",") if h.strip()]
        return value

    @field_validator("seccomp_profile")
    @classmethod
    def _readable_profile(cls, value: str) -> str:
        security_opt(value)  # a missing or malformed file stops the start, naming the path
        return value

    def config(self) -> SandboxConfig:
        return SandboxConfig(**{**self.model_dump(), "docker_hosts": tuple(self.docker_hosts)})
