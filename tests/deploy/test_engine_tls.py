"""The server's half of deploy/k8s/'s engine link, for real: an engine addressed as
``https://<name>:2376`` in REWARD_SERVER_SANDBOX_DOCKER_HOSTS, its certificate made by
deploy/k8s/make-certs.sh and trusted through REQUESTS_CA_BUNDLE, runs code (the Docker SDK's
calls and the attach stream both over TLS); an engine whose certificate that CA did not sign
is refused, so the check is real.

The engine's TLS listener here is a TLS terminator in front of the local engine's socket,
standing in for dockerd's own ``--tls`` listener (a second engine would need the sandbox
image loaded into it); what it checks is the client side, which is ours."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reward_server.testing import free_port, run_server, verify_code, wait_for_sandbox
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("docker_ready")
ENGINE_SOCKET = "/var/run/docker.sock"


def _certs(out: Path) -> Path:
    subprocess.run(["sh", str(ROOT / "deploy" / "k8s" / "make-certs.sh"), str(out), "rl", "1",
                    "localhost"], check=True, capture_output=True, timeout=60)
    return out


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def _serve(port: int, context: ssl.SSLContext, stop: asyncio.Event,
                 ready: threading.Event) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        engine_r, engine_w = await asyncio.open_unix_connection(ENGINE_SOCKET)
        await asyncio.gather(_pipe(client_r, engine_w), _pipe(engine_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=context)
    ready.set()
    async with server:
        await stop.wait()


@contextlib.contextmanager
def tls_engine(certs: Path) -> Iterator[str]:
    """The local engine behind TLS with make-certs.sh's engine certificate: its address."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs / "server-cert.pem", certs / "server-key.pem")
    port, loop, stop, ready = free_port(), asyncio.new_event_loop(), asyncio.Event(), \
        threading.Event()
    thread = threading.Thread(target=loop.run_until_complete,
                              args=(_serve(port, context, stop, ready),), daemon=True)
    thread.start()
    assert ready.wait(timeout=30), "the TLS listener did not start"
    try:
        yield f"https://localhost:{port}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)


def test_code_runs_on_an_engine_reached_over_tls(tmp_path: Path) -> None:
    certs = _certs(tmp_path / "certs")
    with tls_engine(certs) as address, run_server(tmp_path / "server", env={
            "REWARD_SERVER_SANDBOX_DOCKER_HOSTS": address,
            "REQUESTS_CA_BUNDLE": str(certs / "ca.pem")}) as srv:
        wait_for_sandbox(srv.url)
        item = {"response": "print(int(input()) * 2)",
                "tests": [{"input": "21", "output": "42"}, {"input": "5", "output": "10"}]}
        wrong = {**item, "response": "print(int(input()) + 1)"}
        results = verify_code(srv.url, item, wrong)
    assert [(r["status"], r["score"]) for r in results] == [("ok", 1.0), ("ok", 0.0)], results


def test_an_engine_certificate_the_ca_did_not_sign_is_refused(tmp_path: Path) -> None:
    """The server trusts only the bundle it is given: an impostor engine gets no code, and
    the items are unscorable (null), not scored by it."""
    certs, other = _certs(tmp_path / "certs"), _certs(tmp_path / "other")
    with tls_engine(certs) as address, run_server(tmp_path / "server", env={
            "REWARD_SERVER_SANDBOX_DOCKER_HOSTS": address,
            "REQUESTS_CA_BUNDLE": str(other / "ca.pem"),
            "REWARD_SERVER_SANDBOX_ACQUIRE_TIMEOUT_S": "5"}) as srv:
        item = {"response": "print(input())", "tests": [{"input": "1", "output": "1"}]}
        (result,) = verify_code(srv.url, item)
        log = srv.log.read_text()
    assert result["score"] is None and result["status"] == "sandbox_unavailable", result
    assert "CERTIFICATE_VERIFY_FAILED" in (result.get("detail") or "") + log, (result, log[-2000:])
