"""A web page in a browser on the server's machine cannot speak for the loopback caller: its
site's Host name (DNS rebinding) and its Origin (a cross-site request or WebSocket) are
refused with a 403 naming the setting, on the real server; trainers' requests, which carry
an IP or a one-label Host and no Origin, are served as before."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import websockets.sync.client as ws_client
from websockets.exceptions import InvalidStatus

from reward_server.browser_guard import host_is_safe, origin_netloc, split_host
from tests.conftest import ServerProcess, run_server

REBOUND = "rebind.attacker.example"
ITEMS = {"items": [{"response": "\\boxed{2}", "answer": "2"}]}


@pytest.mark.parametrize(("host", "parts"), [
    ("127.0.0.1:8000", ("127.0.0.1", "8000")), ("[::1]:80", ("::1", "80")),
    ("LocalHost.", ("localhost", "")), ("a.example:443", ("a.example", "443")),
    ("::1", ("::1", ""))])
def test_split_host(host: str, parts: tuple[str, str]) -> None:
    assert split_host(host) == parts


@pytest.mark.parametrize(("name", "safe"), [
    ("127.0.0.1", True), ("::1", True), ("localhost", True), ("reward", True),
    ("app.localhost", True), ("10.0.0.7", True), (REBOUND, False), ("localhost.evil.io", False),
    ("127.0.0.1.nip.io", False)])
def test_names_no_site_can_own(name: str, safe: bool) -> None:
    assert host_is_safe(name) is safe


def test_origin_netloc_drops_default_ports() -> None:
    assert origin_netloc("http://127.0.0.1:80", "http") == "127.0.0.1"
    assert origin_netloc("https://A.example:8443", "http") == "a.example:8443"
    assert origin_netloc("http://[::1]:8000", "http") == "[::1]:8000"
    assert origin_netloc("null", "http") is None


def _port(srv: ServerProcess) -> str:
    return srv.url.rsplit(":", 1)[1]


def test_a_rebound_page_cannot_read_or_run_as_the_loopback_caller(
        server: ServerProcess) -> None:
    """The page's name resolves to 127.0.0.1, so to the browser its requests are its own
    site's; the Host header still names the site. It listed the trainer's sessions and ran
    cells in them before."""
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Host": f"{REBOUND}:{_port(server)}"}) as page:
        listed = page.get("/v1/sessions")
        scored = page.post("/v1/verify/math", json=ITEMS)
    for answer in (listed, scored):
        assert answer.status_code == 403, answer.text
        assert "allowed_hosts" in answer.json()["detail"] and REBOUND in answer.json()["detail"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "reward", "[::1]"])
def test_trainers_hosts_are_served(server: ServerProcess, host: str) -> None:
    with httpx.Client(base_url=server.url, timeout=60,
                      headers={"Host": f"{host}:{_port(server)}"}) as c:
        answer = c.post("/v1/verify/math", json=ITEMS)
    assert answer.status_code == 200 and answer.json()["results"][0]["score"] == 1.0, answer.text


def test_a_cross_site_request_is_refused_and_the_servers_own_page_served(
        server: ServerProcess) -> None:

    with httpx.Client(base_url=server.url, timeout=60) as c:
        other = c.post("/v1/verify/math", json=ITEMS, headers={"Origin": "http://evil.example"})
        null = c.post("/v1/verify/math", json=ITEMS, headers={"Origin": "null"})
        own = c.post("/v1/verify/math", json=ITEMS, headers={"Origin": server.url})
    assert other.status_code == null.status_code == 403, (other.text, null.text)
    assert "allowed_origins" in other.json()["detail"]
    assert own.status_code == 200, own.text  # the API page's "try it out"


def test_a_cross_site_websocket_is_refused_at_its_handshake(server: ServerProcess) -> None:
    """Browsers open a WebSocket to any origin and leave the refusal to the server: the
    environment's episode would have run as the loopback caller."""
    url = server.url.replace("http", "ws", 1) + "/v1/environments/verifier/ws"
    with pytest.raises(InvalidStatus) as refused:
        ws_client.connect(url, origin="http://evil.example", open_timeout=60)  # type: ignore[arg-type]
    assert refused.value.response.status_code == 403
    with ws_client.connect(url, open_timeout=60) as episode:  # a trainer's client: no Origin
        episode.send('{"type": "state", "data": {}}')
        assert '"type"' in episode.recv(timeout=60)


def test_the_operator_names_more_hosts_and_origins(tmp_path: Path) -> None:
    env = {"REWARD_SERVER_ALLOWED_HOSTS": "trainer.lab.example",
           "REWARD_SERVER_ALLOWED_ORIGINS": "https://dash.lab.example"}

    with run_server(tmp_path, env=env) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        named = c.post("/v1/verify/math", json=ITEMS,
                       headers={"Host": "trainer.lab.example", "Origin": "https://dash.lab.example"})
        other = c.post("/v1/verify/math", json=ITEMS, headers={"Host": REBOUND})
    assert named.status_code == 200, named.text
    assert other.status_code == 403, other.text
