"""The sandbox's own seccomp profile (sandbox/seccomp.json): what it is made of, and what a
program inside the sandbox meets, under runc and under gVisor."""

from __future__ import annotations

import errno
import json
import platform
from collections.abc import Iterator
from typing import Any

import pytest

from sandbox.seccomp import ENGINE_DEFAULT, PROFILE, PROFILE_GVISOR, security_opt
from sandbox.seccomp_generate import (
    MQUEUE_SYSCALLS,
    SOCKET_FAMILIES,
    allowlist,
    for_gvisor,
    generate,
    socket_rules,
)
from tests.conftest import SandboxRuntime, ServerProcess
from tests.helpers.code import code_server, verify_one

BLOCKED_NAMES = {"io_uring_setup", "io_uring_enter", "io_uring_register", "socketcall",
                 "keyctl", "add_key", "request_key", "userfaultfd", "kexec_load"}
AF_ALG, AF_VSOCK = 38, 40


def allowed_families(profile: dict[str, Any]) -> set[int]:
    """The socket families the profile lets through, evaluated as runc does: each rule's
    comparisons on one argument are ORed, the rules too."""
    ops = {"SCMP_CMP_LT": lambda a, v: a < v, "SCMP_CMP_EQ": lambda a, v: a == v}
    allowed = set()
    for rule in profile["syscalls"]:
        if "socket" not in rule["names"] or rule["action"] != "SCMP_ACT_ALLOW":
            continue
        if not rule.get("args"):
            return set(range(64))
        for family in range(64):
            if any(ops[a["op"]](family, a["value"]) for a in rule["args"]):
                allowed.add(family)
    return allowed


# --- the profile itself (pure) -----------------------------------------------------------------


def test_shipped_profile_blocks_what_upstream_blocks_and_32_bit_calls() -> None:
    profile = json.loads(PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO" and profile["defaultErrnoRet"] == 1
    assert {a["architecture"] for a in profile["archMap"]} >= {"SCMP_ARCH_X86_64",
                                                                "SCMP_ARCH_AARCH64"}
    assert all(not a["subArchitectures"] for a in profile["archMap"])  # no int 0x80, no x32
    unconditional = set()
    for rule in profile["syscalls"]:
        if rule["action"] == "SCMP_ACT_ALLOW" and not (rule.get("includes") or {}).get("caps"):
            unconditional |= set(rule["names"]) - {"socket"}  # socket: by family below
    assert not BLOCKED_NAMES & unconditional
    assert {"read", "clone", "futex", "execve", "wait4", "mmap"} <= unconditional
    families = allowed_families(profile)
    assert AF_ALG not in families and AF_VSOCK not in families
    assert families - {0} == set(SOCKET_FAMILIES.values())


@pytest.mark.parametrize(("families", "rules"), [
    ({1, 2, 10, 16}, [("SCMP_CMP_LT", 3), ("SCMP_CMP_EQ", 10), ("SCMP_CMP_EQ", 16)]),
    ({1}, [("SCMP_CMP_LT", 2)]),
    ({2, 3}, [("SCMP_CMP_EQ", 2), ("SCMP_CMP_EQ", 3)]),  # no run from 1: equalities only
    (set(), []),
])
def test_socket_rules_one_range_then_equalities(families: set[int],
                                                rules: list[tuple[str, int]]) -> None:
    made = socket_rules(families, "c")
    assert [(r["args"][0]["op"], r["args"][0]["value"]) for r in made] == rules
    assert allowed_families({"syscalls": made}) - {0} == families


def test_generate_applies_upstream_changes_to_a_20_10_profile() -> None:
    base = {"defaultAction": "SCMP_ACT_ERRNO", "archMap": [
        {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
            "syscalls": [
        {"names": ["read", "socket", "socketcall", "io_uring_setup", "io_uring_enter",
                   "io_uring_register"], "action": "SCMP_ACT_ALLOW", "args": [],
         "includes": {}, "excludes": {}},
        {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}},
        *({"names": [n], "action": "SCMP_ACT_ALLOW", "includes": {"caps": [c]}} for n, c in (
            ("name_to_handle_at", "CAP_SYS_ADMIN"), ("clock_settime", "CAP_SYS_TIME"),
            ("mbind", "CAP_SYS_NICE")))]}
    profile = generate(base)
    assert base["syscalls"][0]["names"][1] == "socket"  # the input is left alone
    allow = profile["syscalls"][0]["names"]
    assert "read" in allow and "name_to_handle_at" in allow and "futex_waitv" not in allow
    assert not {"socket", "socketcall", "io_uring_setup"} & set(allow)
    assert allowed_families(profile) - {0} == set(SOCKET_FAMILIES.values())
    assert profile["defaultErrnoRet"] == 1
    assert profile["archMap"][0]["subArchitectures"] == []


def test_gvisor_variant_allows_clone3_and_denies_message_queues() -> None:
    """runsc ignores errnoRet: no rule may rely on it, and clone3 must reach gVisor (ENOSYS
    there) so glibc falls back to clone; mq_* fall to the default action (EPERM)."""
    ours, gvisor = json.loads(PROFILE.read_text()), json.loads(PROFILE_GVISOR.read_text())
    assert gvisor == for_gvisor(ours)
    allowed = set(allowlist(gvisor)["names"])
    assert "clone3" in allowed and not allowed & set(MQUEUE_SYSCALLS)
    assert not [r for r in gvisor["syscalls"] if "errnoRet" in r]
    assert set(allowlist(ours)["names"]) - allowed == set(MQUEUE_SYSCALLS)
    assert gvisor["syscalls"][1:] == [r for r in ours["syscalls"][1:]
                                      if r["names"] != ["clone3"]]


def test_security_opt_choices(tmp_path) -> None:
    ours = security_opt("")
    assert ours[0] == "no-new-privileges" and ours[1].startswith("seccomp={")
    assert json.loads(ours[1].removeprefix("seccomp=")) == json.loads(PROFILE.read_text())
    gvisor = json.loads(security_opt("", gvisor=True)[1].removeprefix("seccomp="))
    assert gvisor == json.loads(PROFILE_GVISOR.read_text())
    assert security_opt("", gvisor=False) == ours
    assert security_opt(ENGINE_DEFAULT) == ("no-new-privileges",)
    (tmp_path / "bad.json").write_text("[1]")
    for path in (tmp_path / "missing.json", tmp_path / "bad.json"):
        with pytest.raises(ValueError, match=str(path)):
            security_opt(str(path))


# --- inside the sandbox ---------------------------------------------------------------------

# x86_64 syscall numbers; each is called so that, were it allowed, it would fail with another
# errno than EPERM (EFAULT, EBADF, EINVAL) or succeed.
PROBE = r"""
import ctypes, errno, os, socket, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return 0 if r >= 0 else ctypes.get_errno()
def sock(family, kind, proto=0):
    try:
        socket.socket(family, kind, proto).close()
        return 0
    except OSError as exc:
        return exc.errno
got = {
    "io_uring_setup": call(425, 1, 0), "io_uring_enter": call(426, -1, 0, 0, 0, 0, 0),
    "io_uring_register": call(427, -1, 0, 0, 0), "socket AF_VSOCK": sock(40, 1),
    "socket AF_ALG": sock(38, 5), "socket AF_TIPC": sock(30, 2), "keyctl": call(250, 0, 0),
    "add_key": call(248, 0, 0, 0, 0, 0), "userfaultfd": call(323, 0), "bpf": call(321, 0, 0, 0),
    "perf_event_open": call(298, 0, 0, -1, -1, 0), "unshare user ns": call(272, 0x10000000),
    "mount": call(165, 0, 0, 0, 0, 0), "personality READ_IMPLIES_EXEC": call(135, 0x0400000),
    "mq_open": call(240, 0, 0, 0, 0),
    "socket AF_UNIX": sock(1, 1), "socket AF_INET": sock(2, 2), "socket AF_INET6": sock(10, 1),
    "socket AF_NETLINK": sock(16, 3), "socketpair": 0 if socket.socketpair() else 1,
}
box = []
threads = [threading.Thread(target=lambda: box.append(sum(range(10**5)))) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
got["threads"] = 0 if box == [sum(range(10**5))] * 4 else 1
pid = os.fork()
if pid == 0:
    os._exit(7)
got["fork"] = 0 if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7 else 1
bad = {k: errno.errorcode.get(v, v) for k, v in got.items() if not (
    EXPECTED[k] is None or v == EXPECTED[k] or (EXPECTED[k] == "fails" and v != 0))}
if bad:
    raise SystemExit(f"unexpected: {bad} (expected {EXPECTED})")
print("ok")
"""

ALLOWED = ("socket AF_UNIX", "socket AF_INET", "socket AF_INET6", "socket AF_NETLINK",
           "socketpair", "threads", "fork")

# Compiled and run like any C++ answer. "ring E": io_uring_setup through the 64-bit entry must
# fail (with errno E when E > 0) and a thread must work; "socketcall": socketcall(SYS_SOCKET)
# through the 32-bit entry, arguments in the low 4 GB, asking for AF_VSOCK.
PROBE_CPP = r"""
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
int main() {
  char what[16] = {0};
  int want = 0;
  if (std::scanf("%15s %d", what, &want) < 1) return 2;
  if (std::strcmp(what, "ring") == 0) {
    long ring = syscall(425, 1, 0);  // io_uring_setup(1, NULL): EFAULT were it allowed
    int err = errno;
    long sum = 0;
    std::thread worker([&] { for (int i = 0; i < 1000; ++i) sum += i; });
    worker.join();
    bool ok = ring == -1 && (want == 0 ? err != 0 : err == want) && sum == 499500;
    std::printf(ok ? "ok\n" : "ring %ld errno %d sum %ld\n", ring, err, sum);
    return 0;
  }
  unsigned* args = (unsigned*)mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
  args[0] = 40;  // AF_VSOCK
  args[1] = 1;   // SOCK_STREAM
  args[2] = 0;
  long fd;
  asm volatile("int $0x80" : "=a"(fd) : "a"(102L), "b"(1L), "c"(args) : "memory");
  int domain = 0;  // gVisor takes int 0x80 for a 64-bit call (102: getuid): check the fd
  socklen_t size = sizeof domain;
  bool vsock = fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &size) == 0
               && domain == 40;
  std::printf(vsock ? "created\n" : "blocked\n");
}
"""


def expected(runtime: str) -> dict[str, int | str | None]:
    """The profile answers EPERM under runc, and under runsc too, where it is applied inside
    gVisor (sandbox/seccomp-gvisor.json, runsc's --oci-seccomp: sandbox/testing.py's RUNSC_ARGS).
    mq_open (NULL name: EFAULT where allowed) is denied under gVisor only, which keeps queue
    names between executions; under runc the harness empties /dev/mqueue."""
    names = ("io_uring_setup", "io_uring_enter", "io_uring_register", "socket AF_VSOCK",
             "socket AF_ALG", "socket AF_TIPC", "keyctl", "add_key", "userfaultfd", "bpf",
             "perf_event_open", "unshare user ns", "mount", "personality READ_IMPLIES_EXEC")
    mq_open = errno.EFAULT if runtime == "runc" else errno.EPERM
    return {**dict.fromkeys(names, errno.EPERM), "mq_open": mq_open,
            **dict.fromkeys(ALLOWED, 0)}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory,
        sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
    env = {**sandbox_runtime.env, "REWARD_SERVER_SANDBOX_POOL_SIZE": "1",
           "REWARD_SERVER_CACHE_SIZE": "0"}
    with code_server(tmp_path_factory.mktemp(f"seccomp-{sandbox_runtime.name}"), env=env) as s:
        yield s


@pytest.fixture(autouse=True)
def _x86_64_only(request: pytest.FixtureRequest) -> None:
    if "srv" in request.fixturenames and platform.machine() != "x86_64":
        pytest.skip("the probes use x86_64 syscall numbers")


def test_blocked_syscalls_fail_and_ordinary_ones_work(srv: ServerProcess,
                                                      sandbox_runtime: SandboxRuntime) -> None:
    program = f"EXPECTED = {expected(sandbox_runtime.name)!r}\n{PROBE}"
    result = verify_one(srv, time_limit_s=20, response=program,
                        tests=[{"input": "", "output": "ok"}])
    assert result["score"] == 1.0, result


def test_socketcall_and_io_uring_from_cpp(srv: ServerProcess,
                                          sandbox_runtime: SandboxRuntime) -> None:
    result = verify_one(srv, time_limit_s=20, response=PROBE_CPP, language="cpp", tests=[
        {"input": f"ring {errno.EPERM}", "output": "ok"},
        {"input": "socketcall", "output": "blocked"}])
    ring, socketcall = result["tests"]
    assert ring["status"] == "passed", result
    # runc: a 32-bit syscall is no architecture of the profile, so SIGSYS. gVisor has no
    # 32-bit entry at all: the call is a 64-bit getuid and no socket is made.
    expected = "runtime_error" if sandbox_runtime.name == "runc" else "passed"
    assert socketcall["status"] == expected, result
