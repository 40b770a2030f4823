"""The scoring workers' least privilege (reward_server/worker_isolation.py): what code that
took over a worker would find there. Probed from inside a pool's worker, and from outside the
real server's workers."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import hashlib
import json
import os
import secrets
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from reward_server import worker_isolation
from reward_server.process_pool import TimeoutPool
from reward_server.testing import run_server

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")


def test_a_worker_starts_with_no_credential_in_its_environment() -> None:
    environ = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
               "REWARD_SERVER_API_TOKEN": "t", "REWARD_SERVER_SETTINGS_FILE": "/tmp/s.json",
               "DOCKER_HOST": "tcp://engine:2376", "DOCKER_CERT_PATH": "/certs",
               "AWS_SECRET_ACCESS_KEY": "k", "HF_TOKEN": "h", "PYTHONPATH": "/opt/plugins"}
    assert worker_isolation.worker_environment(environ) == {
        "PATH": "/usr/bin", "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
        "PYTHONPATH": "/opt/plugins"}


def test_an_install_under_a_private_directory_is_named(open_tmp_path: Path) -> None:
    private = open_tmp_path / "home"
    (private / "venv" / "lib").mkdir(parents=True)
    private.chmod(0o700)
    assert worker_isolation.unreadable_paths([str(private / "venv" / "lib")]) == [str(private)]
    private.chmod(0o711)  # traversable, not listable: enough to import from below it
    assert worker_isolation.unreadable_paths([str(private / "venv" / "lib")]) == []


def _probe(secret_file: str, secret_digest: str, server_pid: int) -> dict[str, object]:
    """Runs in a worker: everything a takeover would try first."""
    found: dict[str, object] = {"uid": os.getuid(), "euid": os.geteuid(),
                                "groups": os.getgroups()}
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
        found["socket"] = "made"
    except OSError as exc:
        found["socket"] = exc.errno
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
        found["unix_socket"] = "made"
    except OSError as exc:
        found["unix_socket"] = exc.errno
    try:
        found["secret_file"] = Path(secret_file).read_text()
    except OSError as exc:
        found["secret_file"] = exc.errno
    try:
        os.kill(server_pid, 0)
        found["signal_server"] = "sent"
    except OSError as exc:
        found["signal_server"] = exc.errno
    try:
        found["server_environ"] = Path(f"/proc/{server_pid}/environ").read_bytes()[:10].hex()
    except OSError as exc:
        found["server_environ"] = exc.errno
    try:
        with tempfile.NamedTemporaryFile() as scratch:  # its own TMPDIR: for libraries
            scratch.write(b"x")
        found["own_tmp"] = "written"
    except OSError as exc:
        found["own_tmp"] = exc.errno
    try:
        Path("/tmp", f"worker-was-here-{os.getpid()}").write_text("x")
        found["shared_tmp"] = "written"
    except OSError as exc:
        found["shared_tmp"] = exc.errno
    found["environ"] = sorted(os.environ)
    found["status"] = {line.split(":")[0]: line.split(":", 1)[1].strip()
                       for line in Path("/proc/self/status").read_text().splitlines()
                       if line.split(":")[0] in ("NoNewPrivs", "Seccomp")}
    libc = ctypes.CDLL(None, use_errno=True)
    found["dumpable"] = libc.prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    size = 64
    found["secret_in_heap"] = any(
        isinstance(o, str) and len(o) == size
        and hashlib.sha256(o.encode()).hexdigest() == secret_digest
        for o in gc.get_objects())
    return found


@root_only
def test_a_worker_runs_unprivileged_without_network_or_the_servers_memory(
        open_tmp_path: Path) -> None:
    secret = secrets.token_hex(32)  # 64 characters, only in this (the server's) heap
    secret_file = open_tmp_path / "token"
    secret_file.write_text(secret)
    secret_file.chmod(0o600)
    os.environ["REWARD_SERVER_API_TOKEN"] = secret
    try:
        pool = TimeoutPool(1, 512, name="probe-worker")
        try:
            task = asyncio.run(pool.run(_probe, str(secret_file),
                                        hashlib.sha256(secret.encode()).hexdigest(),
                                        os.getpid(), timeout=60))
        finally:
            pool.close()
    finally:
        del os.environ["REWARD_SERVER_API_TOKEN"]
    assert task.outcome == "ok", task
    found = task.value
    assert found["uid"] == found["euid"] >= worker_isolation.UID_BASE
    assert found["groups"] == []
    assert found["socket"] == found["unix_socket"] == 1  # EPERM: the seccomp filter
    assert found["secret_file"] == found["server_environ"] == 13  # EACCES
    assert found["signal_server"] == 1  # EPERM
    assert (found["own_tmp"], found["shared_tmp"]) == ("written", 13)
    assert not any(k.startswith(("REWARD_SERVER_", "DOCKER_")) for k in found["environ"])
    assert found["status"] == {"NoNewPrivs": "1", "Seccomp": "2"}
    assert found["dumpable"] == 0
    assert found["secret_in_heap"] is False


def _workers_of(server_pid: int, name: str) -> list[int]:
    """The processes named ``name`` among the server's descendants (the forkserver's
    children)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            ancestry = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if comm != name:
            continue
        while ancestry > 1 and ancestry != server_pid:
            try:
                ancestry = int(Path(f"/proc/{ancestry}/stat").read_text()
                               .rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
        if ancestry == server_pid:
            found.append(int(proc.name))
    return found


@root_only
def test_the_servers_math_workers_hold_no_token_and_no_network(tmp_path: Path) -> None:
    token = secrets.token_hex(16)
    env = {"REWARD_SERVER_API_TOKEN": token, "REWARD_SERVER_MATH_WORKERS": "1"}
    with run_server(tmp_path, env=env) as srv:
        item = {"items": [{"verifier": "math", "response": "\\boxed{2}", "answer": "2"}]}
        r = httpx.post(f"{srv.url}/v1/rewards", json=item, timeout=60,
                       headers={"Authorization": f"Bearer {token}"})
        assert r.json()["rewards"] == [1.0]
        workers: list[int] = []
        for _ in range(100):  # the spare starts in the background
            workers = _workers_of(srv.proc.pid, "math-worker")
            if len(workers) >= 2:
                break
            time.sleep(0.2)
        assert workers
        own_net = os.readlink("/proc/self/ns/net")
        for pid in workers:
            status = dict(line.split(":", 1) for line in
                          Path(f"/proc/{pid}/status").read_text().splitlines())
            uids = {int(u) for u in status["Uid"].split()}
            assert min(uids) >= worker_isolation.UID_BASE, status["Uid"]
            assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"
            assert token.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
            assert token.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
            assert os.readlink(f"/proc/{pid}/ns/net") != own_net
            mode = Path(f"/proc/{pid}/mem").stat()
            assert mode.st_uid == 0 and not mode.st_mode & stat.S_IROTH  # not dumpable


@root_only
def test_a_task_whose_code_the_worker_cannot_import_is_unavailable(tmp_path: Path) -> None:
    """A plug-in under a directory only its owner reads (pytest's tmp_path): its task is
    not scored (unavailable, null), never a crash that would score the answer 0."""
    (tmp_path / "private_plugin.py").write_text("def score(x):\n    return x\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import private_plugin  # type: ignore[import-not-found]

        pool = TimeoutPool(1, 512, name="probe-worker")
        try:
            task = asyncio.run(pool.run(private_plugin.score, 1, timeout=60))
        finally:
            pool.close()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("private_plugin", None)
    assert task.outcome == "unavailable", task  # pebble's worker fails to unpickle it


@root_only
def test_a_non_root_servers_workers_are_confined_all_the_same(open_tmp_path: Path) -> None:
    """The shipped image runs the server as uid 10002, so its workers share that uid (no
    uid of their own without root): its token file, its environment, the network and a
    signal to the server stay out of a worker's reach even so (Landlock and seccomp)."""
    secret = secrets.token_hex(32)
    secret_file = open_tmp_path / "token"
    secret_file.write_text(secret)
    secret_file.chmod(0o600)
    os.chown(secret_file, NON_ROOT, NON_ROOT)  # the server's user reads it
    script = (
        "import asyncio, json, os, sys\n"
        "from reward_server import worker_isolation\n"
        "from reward_server.process_pool import TimeoutPool\n"
        "from tests.reward_server.test_worker_isolation import _probe\n"
        "worker_isolation.protect_server()\n"
        "pool = TimeoutPool(1, 512, name='probe-worker')\n"
        "task = asyncio.run(pool.run(_probe, *sys.argv[1:3], os.getpid(), timeout=60))\n"
        "pool.close()\n"
        "print(json.dumps(task._asdict()))\n")
    out = subprocess.run(
        [sys.executable, "-c", script, str(secret_file),
         hashlib.sha256(secret.encode()).hexdigest()],
        user=NON_ROOT, group=NON_ROOT, extra_groups=[], cwd=open_tmp_path, timeout=120,
        capture_output=True, text=True,
        env={**os.environ, "REWARD_SERVER_API_TOKEN": secret,
             "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert out.returncode == 0, out.stderr
    task = json.loads(out.stdout.splitlines()[-1])
    assert task["outcome"] == "ok", task
    found = task["value"]
    assert found["uid"] == found["euid"] == NON_ROOT
    assert found["socket"] == found["unix_socket"] == 1  # EPERM: the seccomp filter
    assert found["secret_file"] == 13  # EACCES: Landlock, though its uid owns the file
    assert found["server_environ"] == 13  # EACCES: the server is not dumpable
    assert found["signal_server"] == 1  # EPERM: a signal to itself only
    assert (found["own_tmp"], found["shared_tmp"]) == ("written", 13)  # its own TMPDIR only
    assert not any(k.startswith(("REWARD_SERVER_", "DOCKER_")) for k in found["environ"])
    assert found["status"] == {"NoNewPrivs": "1", "Seccomp": "2"}
    assert found["dumpable"] == 0
    assert found["secret_in_heap"] is False
    assert "share its uid" in out.stderr  # the operator is told, once


NON_ROOT = 10002  # the shipped image's "reward" user
