"""Sandbox settings: the container limits and the pool's shape. The reward server makes its
``--sandbox-*`` settings (``REWARD_SERVER_SANDBOX_*``) from the fields marked ``setting``
here, each with its default, its help and its bounds, and fills this from them; the others
are the sandbox's own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

N = TypeVar("N", int, float)

# The least memory (MB) a caller may ask for a program or an interpreter. Below it Python
# does not start, and an interpreter of a session's or /run_jupyter's that does not start is
# the sandbox's 503 (blamed on the sandbox for the caller's own value). Measured with the
# image's Python 3.11 under its address-space cap: it starts at 16 MB under runc and 24 MB
# under gVisor (C and bash at 10 and 12); 64 leaves room for the modules a cell imports.
MIN_MEMORY_MB = 64


def setting(default: Any, doc: str, **bounds: float) -> Any:
    """A field an operator may set: ``doc`` is its help; ``bounds`` what a value must be
    (pydantic's ``ge``, ``gt``, ``le``), checked when the server reads it."""
    return field(default=default, metadata={"doc": doc, "bounds": bounds})


@dataclass(frozen=True)
class SandboxConfig:
    image: str = setting("verifiable-rewards-sandbox:latest",
                         "The sandbox image (built by sandbox/build_image.sh).")
    docker_host: str | None = setting(None, "One Docker engine; unset: DOCKER_HOST or the "
                                      "local socket.")
    # overrides docker_host
    docker_hosts: tuple[str, ...] = setting((), "Several Docker engines, comma-separated "
                                            "(unix:///var/run/docker.sock,tcp://10.0.0.2:2376): "
                                            "pool_size containers on each.")
    # (sandbox/tls.py) mutual TLS: engines may then run dockerd --tlsverify
    tls_cert_path: str | None = setting(None, (
        "Directory of ca.pem, cert.pem, key.pem (Docker's DOCKER_CERT_PATH layout): every "
        "engine is reached over TLS with this client certificate and checked against this CA, "
        "so engines can run dockerd --tlsverify; unset: no client certificate."))
    health_interval_s: float = 5.0  # how often an engine with containers is checked
    health_timeout_s: float = setting(
        10.0, "How long an engine's ping and /info may each take in a health check. One that "
        "answers its ping but not /info twice in a row is wedged (its containerd stopped or "
        "hung): its warm containers serve until spent, and none is started or removed on it "
        "until it answers again.", gt=0)
    reap_interval_s: float = setting(60.0, "How often containers of dead server processes "
                                     "are looked for and removed.", gt=0)
    pool_size: int = setting(4, "Warm containers per engine; executions run in parallel up to "
                             "this.", ge=1)
    max_uses: int = setting(200, "A container is replaced after this many executions.", ge=1)
    # Per-container limits (the backstop for every process inside)
    memory_mb: int = setting(1024, "Memory of one container (no swap).", ge=64)
    cpus: float = setting(1.0, "CPUs of one container.", gt=0)
    pids_limit: int = setting(128, "Processes and threads in one container (runc).", ge=16)
    nofile: int = 256
    work_tmpfs_mb: int = 128
    # Isolation layers beyond namespaces/cgroups/caps (README: "Isolation, layer by layer")
    runtime: str | None = setting(None, "OCI runtime registered with the engine, e.g. runsc "
                                  "(gVisor); unset: the engine's default runtime (runc on a "
                                  "stock engine), which results name as docker info reports it.")
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
    seccomp_profile: str = setting("", "Seccomp profile JSON; unset: sandbox/seccomp.json; "
                                   "engine-default: the engine's own.")
    # Per-execution limits; items may ask for less, never more (``capped``)
    default_time_limit_s: float = setting(5.0, "Per-test limit when an item sets none.", gt=0)
    max_time_limit_s: float = setting(30.0, "The most per-test time an item can ask for; also "
                                      "the whole run of an assertion item (its tests share "
                                      "one process, in one turn).", gt=0)
    default_memory_mb: int = setting(256, "Per-program memory when an item sets none.", ge=32)
    max_memory_mb: int = setting(768, "The most per-program memory an item can ask for.",
                                 ge=32)
    compile_time_limit_s: float = 30.0
    # An item's whole run (compile and every test) stops here: one slow item cannot hold a
    # container for tests x limit while other items wait for it
    item_budget_s: float = setting(60.0, "Wall-clock budget of one item, compile and all "
                                   "tests: tests it leaves unrun time out.", gt=0, le=600)
    # The most an item may ask for (``budget_s``): a CodeContests row of 200 tests at a
    # quarter of a second each needs 50 s of a correct program; a stdin/stdout item takes
    # turns (TURN_S), so a long one holds a container about one test at a time
    max_item_budget_s: float = setting(300.0, "The most wall-clock budget an item can ask for "
                                       "(budget_s).", gt=0, le=3600)
    compile_memory_mb: int = 768
    # Per test, stdout (and stderr) past this is output_limit. CodeContests' answers run to
    # megabytes (a correct 1.4 MB one failed at 1 MiB); the harness (PID 1) holds one test's
    # output, up to about 3x this while it is copied and decoded, beside a candidate of at
    # most max_memory_mb in the container's memory_mb, so the maximum an item may ask for
    # (``output_limit_mb``) stays well under what that leaves.
    output_limit_bytes: int = setting(8 * 1024 * 1024, "Output one test may write when an "
                                      "item sets none (output_limit past it).", ge=1024)
    max_output_limit_bytes: int = setting(
        32 * 1024 * 1024, "The most output per test an item can ask for (output_limit_mb); the "
        "harness holds about 3x this while it compares, in the container's memory.",
        ge=1024, le=256 * 1024 * 1024)
    stderr_tail_bytes: int = 2048
    # Room for a stream at the output limit beside a little else, where a flood of escaped
    # bytes on both streams and a large file once made a 101 MB answer (the server holds a
    # few copies of it while it answers); the channel's frame (64 MiB) holds 4/3 of the max.
    snippet_response_limit_bytes: int = setting(
        16 * 1024 * 1024, "What one /run_code call sends back: stdout and stderr as JSON text "
        "and the fetched files' base64, together. Past it streams keep their first bytes and "
        "files are left out, named in the answer's cut. A session request's cells together "
        "(and /run_jupyter's): the cell that reaches it keeps what fits, each cut named in the "
        "message, and the cells still to run do not.", ge=64 * 1024, le=32 * 1024 * 1024)
    acquire_timeout_s: float = setting(120.0, "How long an execution may wait for a free "
                                       "container before it is unscorable.", gt=0)


def capped(ask: N | None, default: N, most: N) -> N:
    """The limit a run gets: what its caller asked for (None or 0: nothing, the default), never
    more than the server's ``most``."""
    return min(ask or default, most)
