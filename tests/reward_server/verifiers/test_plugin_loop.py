"""What a plug-in item costs the event loop: nothing that grows with its values. The result
cache's key of a ``check`` verdict (the digest of the item's JSON) was built on the loop for
each item: ~0.13 s of every caller's loop for a million decimals. It is built where the item
is admitted, on a thread for such a body (``ItemBase.check_key``). Measured as the CPU time
of the server's main thread against a control of the same bytes that no route reads; the
machine's load does not inflate CPU time as it does the wall clock."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reward_server.testing import ServerProcess
from tests.conftest import run_server
from tests.helpers.cpu import loop_extra_s, unread_body

VALUES = 1_000_000  # within max_json_values (1 Mi); 19 MB of decimals
ROUNDS = 4
POSTS = 3  # a round's posts: 0.1 s each on the loop, near a round's noise alone
PLUGIN = '''
from reward_server.verifiers import ItemBase, ResultBase, Verifier


class ValuesItem(ItemBase):
    response: str
    values: list[float]


class ValuesVerifier(Verifier):
    name = "values"
    item_model = ValuesItem
    result_model = ResultBase

    def check(self, item):
        return ResultBase(score=1.0, status="ok")
'''


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path: Path = tmp_path_factory.mktemp("plugin-loop")
    (path / "values_plugin.py").write_text(PLUGIN)
    env = {"PYTHONPATH": os.pathsep.join([str(path), os.environ.get("PYTHONPATH", "")]),
           "REWARD_SERVER_PLUGINS": '["values_plugin:ValuesVerifier"]'}
    with run_server(path, env=env) as server:
        yield server


def test_a_plugin_items_cache_key_is_made_off_the_loop(srv: ServerProcess) -> None:
    rng = random.Random(0)  # decimals: the JSON encoder's slowest values, 0.13 s a million
    item = {"response": "x", "values": [rng.random() for _ in range(VALUES)]}
    raw = json.dumps({"items": [item]}).encode()

    def cached() -> None:  # its verdict from the cache after the first: the key, no check
        r = httpx.post(srv.url + "/v1/verify/values", content=raw, timeout=300,
                       headers={"Content-Type": "application/json"})
        assert r.json()["results"][0]["status"] == "ok", r.text[:300]

    cached()
    extra, spent = loop_extra_s(srv, cached, unread_body(srv, raw), ROUNDS, calls=POSTS)
    assert extra < 0.15, spent  # on the loop: 0.3-0.37 s more than the control here; off it 0.02-0.04
