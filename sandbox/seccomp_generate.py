"""Writes ``sandbox/seccomp.json``, the sandbox's own seccomp profile, and its gVisor variant
``sandbox/seccomp-gvisor.json`` (``for_gvisor``): upstream Docker's current default profile,
rebuilt from the 20.10 profile that Debian ships, plus two deviations of ours (fewer socket
families; no 32-bit syscalls). Why our own: the engine's built-in default depends on its
version, and Debian bookworm's Docker 20.10 still allows io_uring and AF_VSOCK sockets
(found by a red-team attack); a profile passed with ``security_opt`` is the same on every engine
(20.10 or later: it uses ``minKernel``, ``errnoRet`` and ``defaultErrnoRet``).

Provenance. The base is ``profiles/seccomp/default.json`` of Debian's
``golang-github-docker-docker-dev`` 20.10.24 (Apache-2.0, The Moby Authors). ``EDITS``
applies, one function each, what upstream changed since (read in moby/moby and
moby/profiles up to commit 02e898b137ae, 2026); ``OURS`` is where we deliberately differ.
Regenerate (no network but the apt mirror):

    apt-get download golang-github-docker-docker-dev
    dpkg-deb -x golang-github-docker-docker-dev_*.deb /tmp/moby
    python -m sandbox.seccomp_generate \
        /tmp/moby/usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json

Only rules that matter on x86_64 and aarch64 are carried over (Docker picks rules by its
own architecture; the MIPS/s390/RISC-V details of upstream are left as Debian has them).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

Profile = dict[str, Any]
Rule = dict[str, Any]

OUT = Path(__file__).resolve().parent / "seccomp.json"
OUT_GVISOR = OUT.with_name("seccomp-gvisor.json")

# POSIX message queues: gVisor keeps their names in its own kernel with no /dev/mqueue to list
# and remove them by, so a name left by one program reaches the next (a covert channel past
# the clean slate); nothing in a code test needs a message queue.
MQUEUE_SYSCALLS = ("mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive",
                   "mq_timedreceive_time64", "mq_timedsend", "mq_timedsend_time64", "mq_unlink")

# Address families a program under test may open: local sockets only (the container has no
# network; glibc's getaddrinfo and Python's if_nameindex use netlink). Upstream allows every
# family the kernel still implements except AF_ALG (38) and AF_VSOCK (40); each further
# family (RDS, TIPC, CAN, KCM, SMC, XDP, ...) is kernel attack surface with a history of
# privilege escalations and no use in a code test.
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16}
AF_ALG, AF_VSOCK = 38, 40


def allowlist(profile: Profile) -> Rule:
    """The unconditional allow rule (the first one: no args, no includes, no excludes)."""
    for rule in profile["syscalls"]:
        if (rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("args")
                and not rule.get("includes") and not rule.get("excludes")):
            return rule
    raise ValueError("profile has no unconditional allow rule")


def rule_for_cap(profile: Profile, cap: str) -> Rule:
    """The allow rule that only applies to a container holding ``cap``."""
    for rule in profile["syscalls"]:
        if (rule.get("includes") or {}).get("caps") == [cap] and not rule.get("args"):
            return rule
    raise ValueError(f"profile has no rule for {cap}")


def add_names(rule: Rule, names: Iterable[str]) -> None:
    rule["names"] = rule["names"] + [n for n in names if n not in rule["names"]]


def remove_names(rule: Rule, names: Iterable[str]) -> None:
    drop = set(names)
    rule["names"] = [n for n in rule["names"] if n not in drop]


def socket_rules(families: Iterable[int], comment: str) -> list[Rule]:
    """Allow ``socket(2)`` for exactly ``families``. runc ORs repeated comparisons on one
    argument (opencontainers/runc#2735), so a bounded range cannot be written: the lowest
    run starting at 1 becomes one ``arg0 < n`` rule (0, AF_UNSPEC, is not creatable), every
    other family one ``arg0 == n`` rule; anything else falls to the default action."""
    ordered = sorted(set(families))
    rules: list[Rule] = []
    head = 0
    if ordered and ordered[0] == 1:
        while head < len(ordered) and ordered[head] == head + 1:
            head += 1
        rules.append(_socket_rule(head + 1, "SCMP_CMP_LT", comment))
    rules += [_socket_rule(f, "SCMP_CMP_EQ", comment) for f in ordered[head:]]
    return rules


def _socket_rule(value: int, op: str, comment: str) -> Rule:
    return {"names": ["socket"], "action": "SCMP_ACT_ALLOW", "comment": comment,
            "args": [{"index": 0, "value": value, "op": op}]}


# --- upstream's changes since 20.10.24 --------------------------------------------------------


def block_io_uring(p: Profile) -> None:
    """moby#46762 (Docker 25.0): io_uring runs file and socket operations that seccomp never
    sees, and has been the way out of several container escapes (Google kCTF)."""
    remove_names(allowlist(p), ["io_uring_enter", "io_uring_register", "io_uring_setup"])


def socket_by_family(p: Profile) -> None:
    """moby#44562 (23.0) blocked AF_VSOCK (host/VM channels, global across network
    namespaces), moby#52494 (2026, CVE-2026-31431 "Copy Fail") AF_ALG; moby/profiles now
    lists the families allowed. ``socket`` leaves the allowlist for per-family rules (ours
    narrower still: ``SOCKET_FAMILIES``)."""
    assert not {AF_ALG, AF_VSOCK} & set(SOCKET_FAMILIES.values())
    remove_names(allowlist(p), ["socket"])
    at = p["syscalls"].index(allowlist(p)) + 1
    comment = "socket(2) for " + ", ".join(SOCKET_FAMILIES) + " only (sandbox/seccomp_generate.py)"
    p["syscalls"][at:at] = socket_rules(SOCKET_FAMILIES.values(), comment)


def newer_syscalls(p: Profile) -> None:
    """Syscalls of newer kernels that upstream allows (an engine whose libseccomp does not
    know one skips it; the kernel then answers ENOSYS and libc falls back)."""
    add_names(allowlist(p), [
        "cachestat", "fchmodat2", "map_shadow_stack",  # 6.5-6.6
        "futex_requeue", "futex_wait", "futex_wake",  # 6.7
        "listmount", "statmount",  # 6.8
        "mseal",  # 6.9
        "uretprobe",  # 6.11
        "getxattrat", "listxattrat", "removexattrat", "setxattrat",  # 6.13
    ])


def name_to_handle_at_unprivileged(p: Profile) -> None:
    """Upstream moved name_to_handle_at out of the CAP_SYS_ADMIN rule (only its counterpart
    open_by_handle_at is privileged)."""
    remove_names(rule_for_cap(p, "CAP_SYS_ADMIN"), ["name_to_handle_at"])
    add_names(allowlist(p), ["name_to_handle_at"])


def process_vm_with_ptrace(p: Profile) -> None:
    """process_vm_readv/writev follow ptrace: allowed on kernels >= 4.8, where ptrace can no
    longer bypass seccomp (same-uid processes only, and cap_drop ALL)."""
    for rule in p["syscalls"]:
        if rule["names"] == ["ptrace"] and (rule.get("includes") or {}).get("minKernel"):
            add_names(rule, ["process_vm_readv", "process_vm_writev"])
            return
    raise ValueError("profile has no minKernel ptrace rule")


def capability_rules(p: Profile) -> None:
    """Newer privileged syscalls go with their capability (none is granted: cap_drop ALL)."""
    add_names(rule_for_cap(p, "CAP_SYS_ADMIN"),
              ["lsm_get_self_attr", "lsm_list_modules", "lsm_set_self_attr"])
    add_names(rule_for_cap(p, "CAP_SYS_TIME"), ["clock_settime64"])
    add_names(rule_for_cap(p, "CAP_SYS_NICE"), ["set_mempolicy_home_node"])
    for name, cap in (("bpf", "CAP_BPF"), ("perf_event_open", "CAP_PERFMON")):
        p["syscalls"].append({"names": [name], "action": "SCMP_ACT_ALLOW",
                              "includes": {"caps": [cap]}})


def default_errno(p: Profile) -> None:
    """A denied syscall fails with EPERM (explicit since the profile format has the key)."""
    p["defaultErrnoRet"] = 1


# --- ours ---------------------------------------------------------------------------------


def native_abi_only(p: Profile) -> None:
    """No 32-bit entry points (x86 ``int 0x80``, x32, arm32 on arm64): a program calling one
    is killed (SIGSYS). Through the x86 one, socketcall(2) passes its arguments behind a
    pointer seccomp cannot read; with upstream's sub-architectures a probe here created an
    AF_VSOCK socket that way despite the family rules (upstream leaves it to AppArmor or
    SELinux, moby#52547, which a Debian host may lack). moby#33108 gives this remedy: block
    the 32-bit syscalls. Nothing in the sandbox is a 32-bit program."""
    for arch in p["archMap"]:
        arch["subArchitectures"] = []
    remove_names(allowlist(p), ["socketcall"])


EDITS: tuple[Callable[[Profile], None], ...] = (
    block_io_uring, socket_by_family, newer_syscalls, name_to_handle_at_unprivileged,
    process_vm_with_ptrace, capability_rules, default_errno)
OURS: tuple[Callable[[Profile], None], ...] = (native_abi_only,)


def generate(base: Profile) -> Profile:
    """``base`` (Debian's 20.10 profile) with every edit applied; ``base`` is not changed."""
    profile = json.loads(json.dumps(base))
    for edit in EDITS + OURS:
        edit(profile)
    allow = allowlist(profile)
    allow["names"] = sorted(allow["names"], key=lambda n: n.lstrip("_"))
    ordered = {"defaultAction": profile["defaultAction"],
               "defaultErrnoRet": profile["defaultErrnoRet"]}
    return {**ordered, **profile}


def for_gvisor(profile: Profile) -> Profile:
    """``profile`` as runsc can apply it (``--oci-seccomp``), for ``seccomp-gvisor.json``.
    Debian's runsc (20221219) ignores a rule's ``errnoRet``: upstream's "clone3 fails with
    ENOSYS" rule would answer EPERM, on which glibc does not fall back to clone, so no thread
    could start. clone3 is allowed instead (gVisor's own kernel has no clone3: ENOSYS all the
    same) and POSIX message queues are denied (``MQUEUE_SYSCALLS``)."""
    out = json.loads(json.dumps(profile))
    out["syscalls"] = [r for r in out["syscalls"] if r["names"] != ["clone3"]]
    allow = allowlist(out)
    remove_names(allow, MQUEUE_SYSCALLS)
    add_names(allow, ["clone3"])
    allow["names"] = sorted(allow["names"], key=lambda n: n.lstrip("_"))
    return out


def write(profile: Profile, out: Path) -> None:
    out.write_text(json.dumps(profile, indent="\t") + "\n")
    print(f"wrote {out} ({len(profile['syscalls'])} rules)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base", type=Path, help="Debian's profiles/seccomp/default.json (20.10)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    profile = generate(json.loads(args.base.read_text()))
    write(profile, args.out)
    write(for_gvisor(profile), args.out.with_name(OUT_GVISOR.name))


if __name__ == "__main__":
    main()
