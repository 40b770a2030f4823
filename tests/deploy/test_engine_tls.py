"""The server's half of deploy/k8s/'s engine link, for real: an engine addressed as
``https://<name>:2376`` in REWARD_SERVER_SANDBOX_DOCKER_HOSTS, asking for a client certificate
(dockerd ``--tlsverify``), runs code for a server given make-certs.sh's client directory in
REWARD_SERVER_SANDBOX_TLS_CERT_PATH: the Docker SDK's calls and the attach stream both carry
the certificate. A server with no client certificate, or one another CA signed, gets no
engine, and an engine whose certificate that CA did not sign is refused: its items are
unscorable (null), never 0. A directory that lacks a file stops the start in one line.

The engine's listener is tests/deploy/tls_engine.py's terminator in front of the local
engine (it says why)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reward_server.testing import run_server, verify_code, wait_for_sandbox
from tests.deploy.tls_engine import cert_dir, make_certs, tls_engine

pytestmark = pytest.mark.usefixtures("docker_ready")
ITEM = {"response": "print(int(input()) * 2)",
        "tests": [{"input": "21", "output": "42"}, {"input": "5", "output": "10"}]}
STARTUP_S = 180  # a loaded machine's imports (math-verify) before /healthz answers


def test_code_runs_on_an_engine_that_verifies_clients(tmp_path: Path) -> None:
    """The environment's REQUESTS_CA_BUNDLE (another CA's) does not replace the setting's CA."""
    certs, other = make_certs(tmp_path / "certs"), make_certs(tmp_path / "other")
    env = {"REWARD_SERVER_SANDBOX_TLS_CERT_PATH": str(certs / "client"),
           "REQUESTS_CA_BUNDLE": str(other / "ca.pem")}
    with tls_engine(certs, verify_clients=True) as engine, run_server(
            tmp_path / "server", startup_s=STARTUP_S,
            env={"REWARD_SERVER_SANDBOX_DOCKER_HOSTS": engine.address, **env}) as srv:
        wait_for_sandbox(srv.url)
        wrong = {**ITEM, "response": "print(int(input()) + 1)"}
        results = verify_code(srv.url, ITEM, wrong)
    assert [(r["status"], r["score"]) for r in results] == [("ok", 1.0), ("ok", 0.0)], results


def _unscorable(tmp_path: Path, certs: Path, env: dict[str, str]
                ) -> tuple[dict, str, list[str]]:
    """An item's result, the server's log and the engine's refused handshakes."""
    with tls_engine(certs, verify_clients=True) as engine, run_server(
            tmp_path / "server", startup_s=STARTUP_S,
            env={"REWARD_SERVER_SANDBOX_DOCKER_HOSTS": engine.address,
                 "REWARD_SERVER_SANDBOX_ACQUIRE_TIMEOUT_S": "5", **env}) as srv:
        (result,) = verify_code(srv.url, ITEM)
        return result, srv.log.read_text(), engine.refusals


@pytest.mark.parametrize(("client", "reason"), [
    ("none", "PEER_DID_NOT_RETURN_A_CERTIFICATE"),
    ("another CA's", "CERTIFICATE_VERIFY_FAILED")])
def test_a_client_the_engine_cannot_verify_gets_no_engine(tmp_path: Path, client: str,
                                                         reason: str) -> None:
    """Without a client certificate (the engine itself trusted), or with one another CA
    signed: the engine refuses the handshake, and the item is null, not scored. (Under TLS
    1.3 the client learns only that the engine hung up; the engine's side says why.)"""
    certs, other = make_certs(tmp_path / "certs"), make_certs(tmp_path / "other")
    env = {"REQUESTS_CA_BUNDLE": str(certs / "ca.pem")} if client == "none" else {
        "REWARD_SERVER_SANDBOX_TLS_CERT_PATH": str(cert_dir(tmp_path / "mixed", certs, other))}
    result, _, refusals = _unscorable(tmp_path, certs, env)
    assert result["score"] is None and result["status"] == "sandbox_unavailable", result
    assert refusals and set(refusals) == {reason}, refusals


def test_an_engine_certificate_the_ca_did_not_sign_is_refused(tmp_path: Path) -> None:
    """The server trusts only the CA of its directory: an impostor engine gets no code."""
    certs, other = make_certs(tmp_path / "certs"), make_certs(tmp_path / "other")
    trusting_other = cert_dir(tmp_path / "mixed", other, certs)
    result, log, _ = _unscorable(tmp_path, certs,
                              {"REWARD_SERVER_SANDBOX_TLS_CERT_PATH": str(trusting_other)})
    assert result["score"] is None and result["status"] == "sandbox_unavailable", result
    assert "CERTIFICATE_VERIFY_FAILED" in (result.get("detail") or "") + log, (result, log[-2000:])


@pytest.mark.parametrize("fault", ["missing key", "key of another certificate"])
def test_a_bad_client_directory_stops_the_start_in_one_line(tmp_path: Path, fault: str) -> None:
    certs, other = make_certs(tmp_path / "certs"), make_certs(tmp_path / "other")
    broken = cert_dir(tmp_path / "broken", certs, certs)
    if fault == "missing key":
        (broken / "key.pem").unlink()
    else:
        (broken / "key.pem").write_bytes((other / "client" / "key.pem").read_bytes())
    out = subprocess.run([sys.executable, "-m", "reward_server.cli", "--port", "1",
                          "--sandbox-tls-cert-path", str(broken)],
                         capture_output=True, text=True, timeout=120)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, (out.returncode, lines)
    assert "sandbox_tls_cert_path" in lines[0], lines
    expected = str(broken / "key.pem") if fault == "missing key" else "do not load"
    assert expected in lines[0], lines
