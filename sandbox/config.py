"""Sandbox settings: the container limits and the pool's shape. The reward server fills this
from its own settings (``REWARD_SERVER_SANDBOX_*``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

N = TypeVar("N", int, float)


@dataclass(frozen=True)
class SandboxConfig:
    image: str = "verifiable-rewards-sandbox:latest"
    docker_host: str | None = None  # None: DOCKER_HOST or the local socket
    docker_hosts: tuple[str, ...] = ()  # several engines; overrides docker_host
    # A directory of ca.pem, cert.pem, key.pem (Docker's DOCKER_CERT_PATH layout, sandbox/tls.py):
    # mutual TLS to every engine, which may then run dockerd --tlsverify; None: no client cert
    tls_cert_path: str | None = None
    health_interval_s: float = 5.0  # how often an engine with containers is pinged
    reap_interval_s: float = 60.0  # how often containers of dead owners are looked for
    pool_size: int = 4  # warm containers per engine; executions run in parallel up to this
    max_uses: int = 200  # a container is replaced after this many executions
    # Per-container limits (the backstop for every process inside)
    memory_mb: int = 1024  # no swap: memory-swap is set to the same value
    cpus: float = 1.0
    pids_limit: int = 128
    nofile: int = 256
    work_tmpfs_mb: int = 128
    # Isolation layers beyond namespaces/cgroups/caps (README: "Isolation, layer by layer")
    runtime: str | None = None  # OCI runtime the engine knows, e.g. "runsc" (gVisor); None: runc
    # Under gVisor the container's pids limit counts gVisor's own host threads, not the
    # program's processes: its kernel's and gofer's threads (~40), and on the ptrace platform
    # a stub process per address space with a thread for each kernel thread that ran it
    # (~12-20 per process a program starts, kept for reuse). 128 allowed ~10 processes and ran
    # out over executions; at the limit gVisor's kernel panics and the container dies under
    # the next program (README: "Known limits of the gVisor option").
    gvisor_pids_limit: int = 4096
    # After each execution a gVisor container with fewer free pids than this is replaced:
    # every execution starts with at least this many (measured from outside: docker stats).
    gvisor_pids_headroom: int = 2048
    seccomp_profile: str = ""  # "": sandbox/seccomp.json; "engine-default"; or a JSON path
    # Per-execution limits; items may ask for less, never more
    default_time_limit_s: float = 5.0
    max_time_limit_s: float = 30.0
    default_memory_mb: int = 256
    max_memory_mb: int = 768
    compile_time_limit_s: float = 30.0
    # An item's whole run (compile and every test) stops here: one slow item cannot hold a
    # container for tests x limit while other items wait for it
    item_budget_s: float = 60.0
    # The most an item may ask for (``budget_s``): a CodeContests row of 200 tests at a
    # quarter of a second each needs 50 s of a correct program; a stdin/stdout item takes
    # turns (TURN_S), so a long one holds a container about one test at a time
    max_item_budget_s: float = 300.0
    compile_memory_mb: int = 768
    # Per test, stdout (and stderr) past this is output_limit. CodeContests' answers run to
    # megabytes (a correct 1.4 MB one failed at 1 MiB); the harness (PID 1) holds one test's
    # output, up to about 3x this while it is copied and decoded, beside a candidate of at
    # most max_memory_mb in the container's memory_mb, so the maximum an item may ask for
    # (``output_limit_mb``) stays well under what that leaves.
    output_limit_bytes: int = 8 * 1024 * 1024
    max_output_limit_bytes: int = 32 * 1024 * 1024
    stderr_tail_bytes: int = 2048
    # What one snippet (/run_code) sends back: its streams' text (as JSON) and its fetched
    # files' base64, together; past it streams keep their first bytes and files are left out.
    # Room for a stream at the output limit beside a little else, where a flood of escaped
    # bytes on both streams and a large file once made a 101 MB answer (the server holds a
    # few copies of it while it answers); the channel's frame (64 MiB) holds 4/3 of the max.
    snippet_response_limit_bytes: int = 16 * 1024 * 1024
    # How long an execution may wait for a free container before it is unscorable
    acquire_timeout_s: float = 120.0


def capped(ask: N | None, default: N, most: N) -> N:
    """The limit a run gets: what its caller asked for (None or 0: nothing, the default), never
    more than the server's ``most``."""
    return min(ask or default, most)
