"""The engine client's TLS material, laid out as Docker lays it out: one directory holding
``ca.pem`` (the CA that signed the engines), ``cert.pem`` and ``key.pem`` (this client's
certificate, which an engine run with ``--tlsverify`` asks for). It is what DOCKER_CERT_PATH
names for the docker CLI and for the SDK's ``from_env``, so one directory serves the server,
an operator's ``docker --tlsverify`` and deploy/k8s/make-certs.sh's output alike."""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

import docker
from docker.tls import TLSConfig

CA, CERT, KEY = "ca.pem", "cert.pem", "key.pem"


def check_cert_path(path: str) -> str:
    """``path`` when it holds the three files and they load (the key matches the certificate);
    else ValueError naming what is wrong, so a bad directory stops the start in one line
    instead of every engine turning unavailable with an SSL error."""
    root = Path(path)
    missing = [str(root / name) for name in (CA, CERT, KEY) if not (root / name).is_file()]
    if missing:
        raise ValueError(f"engine TLS directory {path!r} lacks {', '.join(missing)} "
                         f"(it needs {CA}, {CERT} and {KEY}, as DOCKER_CERT_PATH does)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(root / CA)
        context.load_cert_chain(root / CERT, root / KEY)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"engine TLS files in {path!r} do not load: {exc}") from None
    return path


class _OwnCA(TLSConfig):
    """Checks the engine against this CA alone. requests lets the environment's
    REQUESTS_CA_BUNDLE override a session's own CA; the client stops reading its environment
    (the bundle, proxies) here, where the SDK configures TLS, before its first call (the
    engine's API version)."""

    def configure_client(self, client: Any) -> None:
        super().configure_client(client)
        client.trust_env = False


def engine_client(host: str | None, tls_cert_path: str | None = None,
                  timeout: float = 30, version: str | None = None) -> docker.DockerClient:
    """A client of one engine (``host``; None: DOCKER_HOST or the local socket). With
    ``tls_cert_path`` every connection, the attach streams included, presents the client
    certificate and checks the engine against that CA alone (``_OwnCA``); ``tcp://`` is
    spoken as HTTPS. ``version``: the API version to speak; None asks the engine's
    (``/version``, which a wedged engine never answers) when the client is made."""
    if not tls_cert_path:
        return docker.DockerClient(base_url=host, timeout=timeout, version=version) if host \
            else docker.from_env(timeout=timeout, version=version)
    root = Path(tls_cert_path)
    tls = _OwnCA(client_cert=(str(root / CERT), str(root / KEY)), ca_cert=str(root / CA),
               verify=True)
    return docker.DockerClient(base_url=host or os.environ.get("DOCKER_HOST"), tls=tls,
                               timeout=timeout, version=version)
