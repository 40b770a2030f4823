"""The local engine behind a TLS listener, as deploy/k8s/'s engines are reached: with the
certificates deploy/k8s/make-certs.sh writes, and (``verify_clients``) asking every connection
for a client certificate that CA signed, as dockerd ``--tlsverify`` does.

A TLS terminator in front of the local engine's socket stands in for dockerd's own listener
(a second engine would need the sandbox image loaded into it); what it checks is the client
side, which is ours. A connection that ends on one side is ended on the other, as a TCP
connection to dockerd ends when its client's process dies."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from reward_server.testing import free_port
from tests.conftest import ROOT

ENGINE_SOCKET = "/var/run/docker.sock"


def make_certs(out: Path) -> Path:
    """make-certs.sh's secrets for one engine, also named ``localhost``: ``out``."""
    subprocess.run(["sh", str(ROOT / "deploy" / "k8s" / "make-certs.sh"), str(out), "rl", "1",
                    "localhost"], check=True, capture_output=True, timeout=60)
    return out


def cert_dir(out: Path, ca_from: Path, client_from: Path) -> Path:
    """A DOCKER_CERT_PATH directory: ``ca_from``'s CA, ``client_from``'s client certificate."""
    out.mkdir(parents=True)
    shutil.copy(ca_from / "ca.pem", out / "ca.pem")
    for name in ("cert.pem", "key.pem"):
        shutil.copy(client_from / "client" / name, out / name)
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


@dataclass
class TLSEngine:
    address: str  # https://localhost:<port>
    refusals: list[str] = field(default_factory=list)  # each refused handshake's reason


async def _serve(engine: TLSEngine, port: int, context: ssl.SSLContext, stop: asyncio.Event,
                 ready: threading.Event) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:  # the handshake here, not in start_server, so that a refusal can be seen
            await client_w.start_tls(context)
        except (ssl.SSLError, ConnectionError) as exc:
            engine.refusals.append(getattr(exc, "reason", None) or type(exc).__name__)
            client_w.close()
            return
        engine_r, engine_w = await asyncio.open_unix_connection(ENGINE_SOCKET)
        await asyncio.gather(_pipe(client_r, engine_w), _pipe(engine_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    ready.set()
    async with server:
        await stop.wait()


@contextlib.contextmanager
def tls_engine(certs: Path, verify_clients: bool = False) -> Iterator[TLSEngine]:
    """The local engine behind TLS with ``certs``' engine certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # trusts no CA but the one given
    context.load_cert_chain(certs / "server-cert.pem", certs / "server-key.pem")
    if verify_clients:  # dockerd --tlsverify --tlscacert=ca.pem
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certs / "ca.pem")
    port, loop, stop, ready = free_port(), asyncio.new_event_loop(), asyncio.Event(), \
        threading.Event()
    engine = TLSEngine(f"https://localhost:{port}")
    thread = threading.Thread(target=loop.run_until_complete,
                              args=(_serve(engine, port, context, stop, ready),), daemon=True)
    thread.start()
    assert ready.wait(timeout=30), "the TLS listener did not start"
    try:
        yield engine
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
