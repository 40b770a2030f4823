"""Every result names what produced it: the provenance blocks through the real server, and
what each part of a block follows (code, verdict settings, libraries, the sandbox image)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest

from reward_server.client import RewardClient
from reward_server.provenance import Provenances, code_digest
from reward_server.settings import settings_class
from reward_server.verifiers.registry import discover
from tests.conftest import IMAGE, run_server, wait_for_sandbox

MATH = {"verifier": "math", "response": "\\boxed{2}", "answer": "2"}
FORMAT = {"verifier": "format", "response": "<think>a</think><answer>b</answer>",
          "rules": ["think_answer"]}


def test_every_response_names_its_verifiers_blocks(http: httpx.Client) -> None:
    listed = {v["name"]: v["provenance"] for v in http.get("/v1/verifiers").json()["verifiers"]}
    body = http.post("/v1/rewards", json={"items": [MATH, FORMAT, MATH]}).json()
    assert body["provenance"] == {"math": listed["math"], "format": listed["format"]}
    math = body["provenance"]["math"]
    assert math["verifier"] == "math" and math["version"] == version("verifiable-rewards")
    assert math["libraries"]["math-verify"] == version("math-verify")
    assert math["libraries"]["sympy"] == version("sympy")
    assert math["sandbox_image"] is None  # math runs on the host
    one = http.post("/v1/verify/math", json={"items": [{"response": "1", "answer": "1"}]})
    assert one.json()["provenance"] == listed["math"]
    reward = http.post("/get_reward", json={"query": ["q 1"], "prompts": ["q "],
                                            "labels": ["1"]}).json()
    assert reward["provenance"] == {"math": listed["math"]}
    assert set(reward["extra_logs"]) == {"correct", "unscorable", "invalid"}  # numbers only


def test_a_refused_item_of_no_verifier_names_none(http: httpx.Client) -> None:
    body = http.post("/v1/rewards", json={"items": [{"verifier": "nope"}, {"x": 1}]}).json()
    assert body["provenance"] == {}


def _blocks(**env: str) -> dict[str, dict]:
    settings = settings_class()(**env)
    verifiers = {name: cls(settings) for name, cls in discover().items()}
    return {n: b.model_dump() for n, b in Provenances(verifiers).current().items()}


def test_settings_digest_follows_verdict_settings_only() -> None:
    base = _blocks()
    stricter = _blocks(math_tolerance=1e-3)
    more_workers = _blocks(math_workers=7, sandbox_pool_size=9)
    assert stricter["math"]["settings"] != base["math"]["settings"]
    assert stricter["math"]["fingerprint"] != base["math"]["fingerprint"]
    assert stricter["format"] == base["format"]  # another verifier's settings are not its own
    assert more_workers == base  # how much runs at once is no verdict
    longer_tests = _blocks(sandbox_default_time_limit_s=9.0)
    assert longer_tests["code"]["settings"] != base["code"]["settings"]


PLUGIN = textwrap.dedent('''
    from reward_server.verifiers.base import ItemBase, ResultBase, Verifier

    class Item(ItemBase):
        response: str

    class Plug(Verifier):
        name = "plug"
        item_model = Item
        result_model = ResultBase

        def check(self, item):
            return ResultBase(score=SCORE, status="ok")
''')


def _plugin(where: Path, score: str, monkeypatch: pytest.MonkeyPatch) -> type:
    """The plug-in verifier of one checkout: ``plug_verifier.py`` in ``where``."""
    where.mkdir()
    (where / "plug_verifier.py").write_text(PLUGIN.replace("SCORE", score))
    monkeypatch.syspath_prepend(str(where))
    monkeypatch.delitem(sys.modules, "plug_verifier", raising=False)
    return importlib.import_module("plug_verifier").Plug


def test_code_digest_follows_the_verifiers_source(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    one = code_digest(_plugin(tmp_path / "a", "1.0", monkeypatch))
    zero = code_digest(_plugin(tmp_path / "b", "0.0", monkeypatch))
    same = code_digest(_plugin(tmp_path / "c", "1.0", monkeypatch))
    assert one != zero
    assert same == one  # the same source in another directory: a file's path is no part


def test_a_client_split_over_two_versions_pins_each_result(tmp_path: Path) -> None:
    """A rolling upgrade: the batch's chunks are answered by servers whose math differs;
    each math result then carries its own server's block, the agreeing ones stay shared."""
    with run_server(tmp_path / "a") as a, \
            run_server(tmp_path / "b", env={"REWARD_SERVER_MATH_TOLERANCE": "0.01"}) as b:
        blocks = [httpx.get(f"{s.url}/v1/verifiers").json()["verifiers"] for s in (a, b)]
        math = [next(v["provenance"] for v in vs if v["name"] == "math") for vs in blocks]
        fmt = next(v["provenance"] for v in blocks[0] if v["name"] == "format")
        with RewardClient([a.url, b.url], batch_size=2) as client:
            out = client.rewards([MATH, FORMAT, MATH, FORMAT])
    assert out.provenance == {"format": fmt}
    pinned = [r["provenance"] for r in out.results if r["verifier"] == "math"]
    assert sorted(p["fingerprint"] for p in pinned) == sorted(m["fingerprint"] for m in math)
    assert all("provenance" not in r for r in out.results if r["verifier"] == "format")


def test_code_results_name_the_sandbox_images_id(docker_ready: None, tmp_path: Path) -> None:
    import docker

    image_id = docker.from_env().images.get(IMAGE).id
    with run_server(tmp_path) as srv:
        wait_for_sandbox(srv.url)
        body = httpx.post(f"{srv.url}/v1/rewards", timeout=120, json={"items": [
            {"verifier": "code", "response": "```python\nprint(input())\n```",
             "tests": [{"input": "3\n", "output": "3\n"}]}]}).json()
    assert body["rewards"] == [1.0]
    assert body["provenance"]["code"]["sandbox_image"] == image_id

