"""Sessions belong to a caller, and a caller is its token: through the real server on loopback
and the real Docker engine, with two teams' tokens. A team's sessions are its own (another
team's list, run and close meet the 404 of an unknown id), one team from four addresses holds
its cap and no more while another team gets a session, and one team's flood of cells waits at
the code verifier's fair gate, so another team's code item takes the next turn."""

from __future__ import annotations

import os
import random
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ServerProcess, run_server, wait_for_sandbox

pytestmark = pytest.mark.usefixtures("docker_ready")

TEAMS = {"team-a": "alpha-" + "1" * 32, "team-b": "beta-" + "2" * 32}
MAX_OPEN, PER_CALLER = 4, 2
SETTINGS = {"REWARD_SERVER_SANDBOX_POOL_SIZE": "1",  # one slot at the gate: turns are visible
            "REWARD_SERVER_SANDBOX_SESSION_MAX_OPEN": str(MAX_OPEN),
            "REWARD_SERVER_SANDBOX_SESSION_MAX_PER_CALLER": str(PER_CALLER)}
ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")


def auth(team: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TEAMS[team]}"}


def teams_server(path: Path, **settings: str) -> Iterator[ServerProcess]:
    """A server with the teams' tokens and ``SETTINGS`` (``settings`` over them)."""
    tokens = path / "tokens"
    tokens.write_text("".join(f"{name}:{token}\n" for name, token in TEAMS.items()))
    os.chmod(tokens, 0o600)
    env = {**SETTINGS, **settings, "REWARD_SERVER_API_TOKENS_FILE": str(tokens)}
    with run_server(path, env=env, startup_s=180) as server:
        wait_for_sandbox(server.url, timeout_s=180, headers=auth("team-a"))
        yield server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from teams_server(tmp_path_factory.mktemp("session-callers"))


def team(srv: ServerProcess, name: str, address: str = "127.0.0.1") -> httpx.Client:
    return httpx.Client(base_url=srv.url, timeout=180, headers=auth(name),
                        transport=httpx.HTTPTransport(local_address=address))


class Opened:
    """Sessions opened in a test, closed at its end by whoever opened them."""

    def __init__(self) -> None:
        self.held: list[tuple[httpx.Client, str]] = []

    def open(self, client: httpx.Client) -> httpx.Response:
        r = client.post("/v1/sessions", json={})
        if r.status_code == 201:
            self.held.append((client, r.json()["session_id"]))
        else:
            client.close()
        return r

    def close(self) -> None:
        for client, session in self.held:
            client.delete(f"/v1/sessions/{session}")
            client.close()


@pytest.fixture
def opened() -> Iterator[Opened]:
    sessions = Opened()
    yield sessions
    sessions.close()


def test_a_teams_sessions_are_its_own(srv: ServerProcess, opened: Opened) -> None:
    a, b = team(srv, "team-a"), team(srv, "team-b")
    r = opened.open(a)
    assert r.status_code == 201, r.text
    mine = r.json()["session_id"]
    assert len(mine) >= 43  # 256 random bits
    assert a.post(f"/v1/sessions/{mine}/run", json={"code": "x = 'mine'"}).status_code == 200
    assert [s["session_id"] for s in a.get("/v1/sessions").json()] == [mine]
    assert b.get("/v1/sessions").json() == []  # on the same address, another caller
    unknown = secrets.token_urlsafe(32)
    for method, path, body in [("GET", "", None), ("POST", "/run", {"code": "x"}),
                               ("DELETE", "", None)]:
        theirs = b.request(method, f"/v1/sessions/{mine}{path}", json=body)
        none = b.request(method, f"/v1/sessions/{unknown}{path}", json=body)
        assert theirs.status_code == none.status_code == 404, (method, theirs.text)
        # word for word the answer to an unknown id: no oracle for which ids exist
        assert theirs.json()["detail"].replace(mine, "ID") == \
            none.json()["detail"].replace(unknown, "ID")
    # the same team from another address is the same caller, and its session is untouched
    with team(srv, "team-a", "127.0.0.2") as elsewhere:
        got = elsewhere.post(f"/v1/sessions/{mine}/run", json={"code": "x"}).json()
        assert got["cells"][0]["display"] == [{"text/plain": "'mine'"}], got
    b.close()


def test_one_team_from_four_addresses_cannot_fill_the_server(srv: ServerProcess,
                                                              opened: Opened) -> None:
    """By address, four loopback addresses held 4 x PER_CALLER >= MAX_OPEN sessions and every
    other caller got 429; a team is one caller, whatever address it comes from."""
    answers = [opened.open(team(srv, "team-a", address)) for address in ADDRESSES]
    assert [r.status_code for r in answers] == [201] * PER_CALLER + [429] * (4 - PER_CALLER)
    refused = answers[-1]
    assert "sandbox_session_max_per_caller" in refused.json()["detail"]
    assert int(refused.headers["retry-after"]) >= 1
    r = opened.open(team(srv, "team-b", ADDRESSES[-1]))
    assert r.status_code == 201, r.text


# A cell that burns 0.3 s of CPU and prints when it started and ended (the host's clock:
# the containers share its kernel), so the cells' turns can be put in order
CELL = ("import time\nt0 = time.time()\ns = time.process_time()\n"
        "while time.process_time() - s < 0.3:\n    pass\nprint(t0, time.time())")
FLOOD = 8  # cells per request, one request per session of the flooding team


def open_each(opened: Opened, clients: list[httpx.Client]) -> list[str]:
    """A session for each client: their ids."""
    ids = []
    for client in clients:
        r = opened.open(client)
        assert r.status_code == 201, r.text
        ids.append(r.json()["session_id"])
    return ids


def wait_until_busy(clients: list[httpx.Client], ids: list[str], runs: list[Any]) -> None:
    """Until every session's run request is in (a busy session has no expiry)."""
    deadline = time.monotonic() + 120
    while not all(c.get(f"/v1/sessions/{s}").json()["expires_in_s"] is None
                  for c, s in zip(clients, ids, strict=True)):
        assert time.monotonic() < deadline and not any(f.done() for f in runs)
        time.sleep(0.05)


def echo_item() -> dict[str, Any]:
    token = str(random.getrandbits(64))
    return {"response": "```python\nprint(input())\n```",
            "tests": [{"input": token, "output": token}]}


def test_a_flood_of_cells_waits_its_turn_at_the_gate(srv: ServerProcess,
                                                     opened: Opened) -> None:
    """Team A runs cells in two sessions at once while team B posts a code item, on a server
    whose gate has one slot. Cells bypassing the gate ran in both sessions at once, beside
    every code item; at the gate each cell holds the slot for its turn (no two cells of the
    two sessions overlap), and B's item, an arriving caller, takes the next free turn
    instead of waiting behind the flood (most of A's cells start after B has its answer)."""
    flooders = [team(srv, "team-a", address) for address in ADDRESSES[:2]]
    ids = open_each(opened, flooders)

    def flood(client: httpx.Client, session: str) -> dict:
        r = client.post(f"/v1/sessions/{session}/run",
                        json={"cells": [CELL] * FLOOD, "cell_timeout": 60})
        assert r.status_code == 200, r.text
        return r.json()

    with ThreadPoolExecutor(2) as threads, team(srv, "team-b") as b:
        floods = [threads.submit(flood, c, s) for c, s in zip(flooders, ids, strict=True)]
        wait_until_busy(flooders, ids, floods)
        r = b.post("/v1/verify/code", json={"items": [echo_item()]})
        answered = time.time()
        assert r.status_code == 200 and r.json()["results"][0]["score"] == 1.0, r.text
        results = [f.result() for f in floods]
    spans = []
    for result in results:
        assert result["status"] == "Success", result
        spans += [tuple(map(float, cell["stdout"].split())) for cell in result["cells"]]
    assert len(spans) == 2 * FLOOD
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
        assert end <= start, f"two cells ran at once on a gate of one slot: {spans}"
    after = sum(start > answered for start, _ in spans)
    assert after > FLOOD, f"B's item waited behind {2 * FLOOD - after} of A's cells"


@pytest.fixture(scope="module")
def two_slots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Two slots at the gate and a short request budget: a wait past it is ``not_run``."""
    yield from teams_server(tmp_path_factory.mktemp("session-callers-two"),
                            REWARD_SERVER_SANDBOX_POOL_SIZE="2",
                            REWARD_SERVER_REQUEST_BUDGET_S="10")


def test_long_cells_leave_a_slot_for_another_callers_item(two_slots: ServerProcess,
                                                          opened: Opened) -> None:
    """Team A runs a 15 s cell in each of its two sessions at once; team B posts a code item
    meanwhile. A cell cannot end its turn early, so cells held both slots and B's item came
    back ``not_run`` (null) when its 10 s budget ran out; now cells hold all slots but one,
    and B's item is scored while A's cells still run."""
    clients = [team(two_slots, "team-a", address) for address in ADDRESSES[:2]]
    ids = open_each(opened, clients)

    def run(client: httpx.Client, session: str) -> httpx.Response:
        return client.post(f"/v1/sessions/{session}/run",
                           json={"cells": ["import time\ntime.sleep(15)"], "cell_timeout": 60})

    with ThreadPoolExecutor(2) as threads, team(two_slots, "team-b") as b:
        cells = [threads.submit(run, c, s) for c, s in zip(clients, ids, strict=True)]
        wait_until_busy(clients, ids, cells)
        time.sleep(1)  # the cells that may start have started
        r = b.post("/v1/verify/code", json={"items": [echo_item()]})
        still_running = not all(f.done() for f in cells)
        answers = [f.result() for f in cells]
    assert r.status_code == 200, r.text
    result = r.json()["results"][0]
    assert (result["status"], result["score"]) == ("ok", 1.0), result
    assert still_running, "B's item was answered only after A's cells ended"
    # A's first cell ran; its second waited for A's own slot, within A's budget or not
    assert any(a.status_code == 200 and a.json()["status"] == "Success" for a in answers), [
        a.text for a in answers]
