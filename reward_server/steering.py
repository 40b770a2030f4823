"""Which worker process a connection reaches: the same one for every connection of a caller.

With one listening socket shared by ``--workers K`` processes, the kernel hands each new
connection to whichever process accepts first, so one caller's requests spread over all K:
each process counts the caps (``quotas``) and shares its workers (``fair_queue``) for the
share it holds, a caller may hold K times each cap, and a session opened in one process is
unknown to the others. So each process gets a listening socket of its own, all K in one
``SO_REUSEPORT`` group on the same port, and a classic BPF program attached to the group
picks the socket from the connection's source address: an IPv4 address modulo K, an IPv6
address by its /64, all of loopback the first (as ``callers`` counts quotas). Every
connection from one address then lands in one process, whose caps, fair share and sessions
are that caller's whole.

A process claims its socket's index by locking ``<dir>/worker-<i>.lock`` (the first free
one): a worker that dies releases its lock with its life, and uvicorn's replacement takes
the same index, so the connections queued for it meanwhile are served.

Callers named by tokens are counted per process like this only when each token's
connections come from one address (a trainer host); a token used from many hosts, or every
caller behind one proxy address, needs the proxy to route by token instead
(``docs/deploy.md``).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
from pathlib import Path

SO_ATTACH_REUSEPORT_CBPF = 51  # <asm-generic/socket.h>
SKF_NET_OFF = -0x100000  # loads relative to the network header
STEERING_ENV = "REWARD_SERVER_STEERING"  # "<workers>:<lock dir>", set for the workers

# classic BPF opcodes (<linux/filter.h>)
_LD_W_ABS, _LD_B_ABS = 0x20, 0x30
_ALU_RSH_K, _ALU_XOR_X, _ALU_MOD_K = 0x74, 0xAC, 0x94
_JEQ_K, _TAX, _RET_A, _RET_K = 0x15, 0x07, 0x16, 0x06


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def _net(offset: int) -> int:
    return (SKF_NET_OFF + offset) & 0xFFFFFFFF


def caller_program(workers: int) -> list[tuple[int, int, int, int]]:
    """The BPF program: the index of the socket for the packet's source address."""
    return [
        (_LD_B_ABS, 0, 0, _net(0)),       # 0: A = the IP header's first byte
        (_ALU_RSH_K, 0, 0, 4),            # 1: A = the IP version
        (_JEQ_K, 5, 0, 6),                # 2: IPv6: on to 8
        (_LD_B_ABS, 0, 0, _net(12)),      # 3: A = the IPv4 source's first byte
        (_JEQ_K, 9, 0, 127),              # 4: loopback, one caller: on to 14
        (_LD_W_ABS, 0, 0, _net(12)),      # 5: A = the IPv4 source address
        (_ALU_MOD_K, 0, 0, workers),      # 6
        (_RET_A, 0, 0, 0),                # 7
        (_LD_W_ABS, 0, 0, _net(8)),       # 8: A = the IPv6 source's first 32 bits
        (_TAX, 0, 0, 0),                  # 9: X = A
        (_LD_W_ABS, 0, 0, _net(12)),      # 10: A = its next 32 bits (the rest of the /64)
        (_ALU_XOR_X, 0, 0, 0),            # 11
        (_ALU_MOD_K, 0, 0, workers),      # 12
        (_RET_A, 0, 0, 0),                # 13
        (_RET_K, 0, 0, 0),                # 14: the first socket
    ]


def steered_sockets(host: str, port: int, workers: int) -> list[socket.socket]:
    """``workers`` listening sockets on ``host:port`` in one SO_REUSEPORT group, each
    connection sent to one by its source address."""
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    group: list[socket.socket] = []
    try:
        for _ in range(workers):
            sock = socket.socket(family, socket.SOCK_STREAM)
            group.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
            sock.set_inheritable(True)
        for sock in group:  # joining the group in this order makes the indices
            sock.listen(socket.SOMAXCONN)
        program = caller_program(workers)
        code = (_Instruction * len(program))(*(_Instruction(*i) for i in program))
        fprog = _Program(len(program), code)
        group[0].setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF,
                            ctypes.string_at(ctypes.addressof(fprog), ctypes.sizeof(fprog)))
    except OSError:
        for sock in group:
            sock.close()
        raise
    return group


_claimed: tuple[int, int] | None = None  # (index, the lock's descriptor) of this process


def claimed_index(directory: str | os.PathLike[str], workers: int) -> int:
    """This process's socket: the first index whose lock is free (held for its life)."""
    global _claimed
    if _claimed is not None:
        return _claimed[0]
    for index in range(workers):
        fd = os.open(Path(directory) / f"worker-{index}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _claimed = (index, fd)
        return index
    raise RuntimeError(f"all {workers} worker sockets are taken")
