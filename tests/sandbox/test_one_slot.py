"""With one container, a snippet or a session cell, which cannot end its turn early, holds
the gate's only slot: at most half the request budget, so another caller's item waiting
behind it still runs within its budget. A cell that ignores SIGINT, asking for 60 s, held
the slot 61 s and another caller's correct item came back ``not_run`` (null) after its 60 s
budget (an audit; here the budget is 10 s). Order is read from events, not the clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from reward_server.testing import A, B, as_caller, one_container_server
from tests.conftest import ServerProcess
from tests.helpers.items import ADD
from tests.helpers.metrics import counter, until_let_in

pytestmark = pytest.mark.usefixtures("docker_ready")

BUDGET_S = 10
STUBBORN = ("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "while True:\n    pass\n")


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_REQUEST_BUDGET_S": str(BUDGET_S)}
    with one_container_server(tmp_path_factory.mktemp("one-slot"), env) as srv:
        yield srv


def victim_behind(url: str, hold: Any) -> dict[str, Any]:
    """``hold(client)`` as caller A in a thread; once it holds the slot, caller B's correct
    item: its result."""
    granted = counter(url, "reward_queue_wait_seconds_count")
    thread = threading.Thread(target=lambda: hold(httpx.Client(base_url=url, timeout=300,
                                                               headers=as_caller(A))))
    thread.start()
    until_let_in(url, granted, thread)
    with httpx.Client(base_url=url, timeout=300, headers=as_caller(B)) as c:
        r = c.post("/v1/verify/code", json={"items": [ADD]})
    thread.join()
    return r.json()["results"][0]


def test_a_stubborn_cell_leaves_the_only_slot_within_half_a_budget(one_slot: ServerProcess
                                                                   ) -> None:
    def cell(client: httpx.Client) -> None:
        session = client.post("/v1/sessions", json={}).json()
        assert session["limits"]["max_cell_timeout"] == BUDGET_S / 2 - 1, session
        client.post(f"/v1/sessions/{session['session_id']}/run",
                    json={"code": STUBBORN, "cell_timeout": 60})
        client.delete(f"/v1/sessions/{session['session_id']}")

    result = victim_behind(one_slot.url, cell)
    assert (result["status"], result["score"]) == ("ok", 1.0), result


def test_a_long_snippet_leaves_the_only_slot_within_half_a_budget(one_slot: ServerProcess
                                                                  ) -> None:
    def snippet(client: httpx.Client) -> None:
        r = client.post("/run_code", json={"language": "python", "code": STUBBORN,
                                           "run_timeout": 60})
        assert r.json()["run_result"]["status"] == "TimeLimitExceeded", r.text

    result = victim_behind(one_slot.url, snippet)
    assert (result["status"], result["score"]) == ("ok", 1.0), result
