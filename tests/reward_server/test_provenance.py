"""Every result names what produced it: the provenance blocks through the real server, and
what each part of a block follows (code, verdict settings, libraries, the sandbox image), for
the verifiers and for what runs programs (/run_code, /run_jupyter, sessions); the client
keeps them for ``rewards`` and ``verify``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import packages_distributions, version
from pathlib import Path

import httpx
import pytest

from reward_server import source_digest
from reward_server.client import AsyncRewardClient, RewardClient
from reward_server.provenance import (
    Provenances,
    closure_digest,
    code_digest,
    distribution_of,
)
from reward_server.sandbox_service import SandboxService
from reward_server.settings import settings_class
from reward_server.verifiers.registry import discover
from tests.conftest import IMAGE, ServerProcess, run_server, wait_for_sandbox
from tests.helpers.waiting import eventually

MATH = {"verifier": "math", "response": "\\boxed{2}", "answer": "2"}
FORMAT = {"verifier": "format", "response": "<think>a</think><answer>b</answer>",
          "rules": ["think_answer"]}


@pytest.mark.parametrize("top", ["reward_server", "sandbox", "sympy", "math_verify",
                                 "pydantic_core", "yaml", "no_such_package"])
def test_a_packages_distribution_is_the_one_every_file_list_names(top: str) -> None:
    """The cheap lookups (a distribution named after the package, the declared top-level
    names) find what reading every installed distribution's file list finds."""
    assert set(distribution_of(top)) == set(packages_distributions().get(top, []))


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


# A plug-in whose verdict rests on a helper two imports away from its own package: the
# verifier imports ``plugz.lib.rules``, which imports ``.numbers`` (relatively) for RULE
TREE = {
    "plugz/__init__.py": "",
    "plugz/v/__init__.py": "",
    "plugz/v/verifier.py": PLUGIN.replace("SCORE", "rules.score()").replace(
        "from reward_server", "from plugz.lib import rules\nfrom reward_server"),
    "plugz/lib/__init__.py": "",
    "plugz/lib/rules.py": textwrap.dedent("""
        from typing import TYPE_CHECKING

        from .numbers import RULE

        if TYPE_CHECKING:
            from plugz.lib import hints  # noqa: F401  (types only: never runs)

        def score():
            return RULE
    """),
    "plugz/lib/numbers.py": "RULE = 1.0\n",
    "plugz/lib/hints.py": "Hint = int\n",
}


def _tree(where: Path, **changed: str) -> Path:
    """The plug-in's package tree in ``where``, with ``changed`` files' text (by stem)."""
    for name, text in TREE.items():
        path = where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(changed.get(path.stem, text))
    return where


def _tree_plugin(where: Path, monkeypatch: pytest.MonkeyPatch, **changed: str) -> type:
    monkeypatch.syspath_prepend(str(_tree(where, **changed)))
    for name in [m for m in sys.modules if m == "plugz" or m.startswith("plugz.")]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module("plugz.v.verifier").Plug


def test_code_digest_follows_a_change_two_imports_away(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    one = code_digest(_tree_plugin(tmp_path / "a", monkeypatch))
    zero = code_digest(_tree_plugin(tmp_path / "b", monkeypatch, numbers="RULE = 0.0\n"))
    same = code_digest(_tree_plugin(tmp_path / "c", monkeypatch))
    assert zero != one  # plugz.v.verifier -> plugz.lib.rules -> plugz.lib.numbers
    assert same == one


def test_the_closure_of_a_module_set(tmp_path: Path) -> None:
    """The digest takes any module set: here the tree's verifier module, on its own."""
    def digest(where: Path) -> str:
        return closure_digest(["plugz.v.verifier"], {"plugz": where / "plugz"})

    roots = {"plugz": _tree(tmp_path / "a") / "plugz"}
    assert list(source_digest.closure(["plugz.v.verifier"], roots)) == [
        "plugz", "plugz.lib", "plugz.lib.numbers", "plugz.lib.rules", "plugz.v",
        "plugz.v.verifier"]  # each package it is in, never plugz.lib.hints, and sorted
    base = digest(tmp_path / "a")
    assert digest(_tree(tmp_path / "b", numbers="RULE = 0.5\n")) != base
    assert digest(_tree(tmp_path / "c", hints="Hint = str\n")) == base  # types only
    (tmp_path / "a" / "plugz" / "lib" / "numbers.py").write_text("RULE = 0.25\n")
    assert digest(tmp_path / "a") != base  # a file changed in place is read again


def _sandbox_block(**env: object) -> dict:
    settings = settings_class()(**env)
    verifiers = {name: cls(settings) for name, cls in discover().items()}
    block = Provenances(verifiers, SandboxService.of(settings)).sandbox()
    assert block is not None
    return block.model_dump()


def test_the_sandbox_block_follows_what_changes_a_programs_outcome() -> None:
    base = _sandbox_block()
    # unset, the runtime is the engine's default: unknown until the engine is asked
    assert base["runtime"] is None and base["version"] == version("verifiable-rewards")
    assert _sandbox_block(sandbox_runtime="runsc")["runtime"] == "runsc"
    for changed in ({"sandbox_max_memory_mb": 512}, {"sandbox_cpus": 2.0},
                    {"sandbox_snippet_response_limit_bytes": 1 << 20},
                    {"sandbox_session_output_limit_bytes": 4096},
                    {"sandbox_session_max_total_timeout_s": 60.0},
                    {"sandbox_seccomp_profile": "engine-default"}):
        block = _sandbox_block(**changed)
        assert block["settings"] != base["settings"], changed
        assert block["fingerprint"] != base["fingerprint"], changed
    assert _sandbox_block(sandbox_pool_size=9, sandbox_max_uses=5, sandbox_session_max_open=3,
                          sandbox_session_max_per_caller=1, sandbox_acquire_timeout_s=5.0,
                          sandbox_image="elsewhere:1") == base  # whether it runs, not how


def test_a_rebuilt_image_is_in_every_block_from_then_on() -> None:
    """The pool sets its engine's image id when it connects and when it makes a container
    (sandbox/pool.py); here it is set as the pool would, without rebuilding the shared image."""
    settings = settings_class()()
    verifiers = {name: cls(settings) for name, cls in discover().items()}
    sandbox = SandboxService.of(settings)
    assert sandbox is not None
    provenance = Provenances(verifiers, sandbox)
    [engine] = sandbox.sandbox.pool.pools
    assert provenance.sandbox().sandbox_image is None  # type: ignore[union-attr]
    seen = []
    for image_id in ("sha256:" + "a" * 64, "sha256:" + "b" * 64):
        engine.image_id = image_id
        block = provenance.sandbox()
        assert block is not None and block.sandbox_image == image_id
        assert provenance.current()["code"].sandbox_image == image_id
        assert provenance.current()["math"].sandbox_image is None
        seen.append(block.fingerprint)
    assert seen[0] != seen[1]
    assert provenance.sandbox() is provenance.sandbox()  # no rebuild while the id stays


def test_verify_keeps_what_produced_its_results(server: ServerProcess,
                                                 http: httpx.Client) -> None:
    listed = {v["name"]: v["provenance"] for v in http.get("/v1/verifiers").json()["verifiers"]}
    items = [{"response": "\\boxed{2}", "answer": "2"}, {"response": "1", "answer": "3"}]
    with RewardClient(server.url, batch_size=1) as client:
        out = client.verify("math", items)
    assert [r["score"] for r in out] == [1.0, 0.0]  # still the list of results it was
    assert out == [dict(r) for r in out] and all("provenance" not in r for r in out)
    assert out.provenance == {"math": listed["math"]}
    assert out.provenance_of(0) == out.provenance_of(1) == listed["math"]


async def test_the_async_clients_verify_keeps_it_too(server: ServerProcess,
                                                     http: httpx.Client) -> None:
    listed = {v["name"]: v["provenance"] for v in http.get("/v1/verifiers").json()["verifiers"]}
    async with AsyncRewardClient(server.url) as client:
        out = await client.verify("format", [{k: v for k, v in FORMAT.items()
                                              if k != "verifier"}])
    assert out[0]["status"] == "ok" and out.provenance_of(0) == listed["format"]


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
            verified = client.verify("math", [{k: v for k, v in MATH.items() if k != "verifier"}
                                              for _ in range(4)])
    assert out.provenance == {"format": fmt}
    pinned = [r["provenance"] for r in out.results if r["verifier"] == "math"]
    assert sorted(p["fingerprint"] for p in pinned) == sorted(m["fingerprint"] for m in math)
    assert all("provenance" not in r for r in out.results if r["verifier"] == "format")
    # verify's results name no verifier: each still carries its own server's block
    assert verified.provenance == {}
    pinned = [verified.provenance_of(i)["fingerprint"] for i in range(4)]  # type: ignore[index]
    assert sorted(pinned) == sorted(m["fingerprint"] for m in math for _ in range(2))


def test_code_results_and_runs_name_the_sandbox_images_id(docker_ready: None,
                                                          tmp_path: Path) -> None:
    """Code items (in /v1/rewards and in the list of verifiers), and the programs of
    /run_code, /run_jupyter and a session, name the image's id; the runs' answers carry one
    block, which SandboxFusion's own client models read past (its pydantic models ignore a
    key they do not know). A session's every answer (create, get, list, run, close) names
    what runs its cells."""
    import docker
    import sandbox_fusion

    engine = docker.from_env()
    image_id = engine.images.get(IMAGE).id
    default_runtime = engine.info()["DefaultRuntime"]
    with run_server(tmp_path) as srv, httpx.Client(base_url=srv.url, timeout=120) as c:
        wait_for_sandbox(srv.url)
        body = c.post("/v1/rewards", json={"items": [
            {"verifier": "code", "response": "```python\nprint(input())\n```",
             "tests": [{"input": "3\n", "output": "3\n"}]}]}).json()
        listed = {v["name"]: v["provenance"] for v in c.get("/v1/verifiers").json()["verifiers"]}
        ran = c.post("/run_code", json={"code": "print(6 * 7)", "language": "python"}).json()
        cells = c.post("/run_jupyter", json={"cells": ["6 * 7"]}).json()
        created = c.post("/v1/sessions", json={}).json()
        session = created["session_id"]
        got = c.get(f"/v1/sessions/{session}").json()
        [mine] = c.get("/v1/sessions").json()
        turn = c.post(f"/v1/sessions/{session}/run", json={"code": "6 * 7"}).json()
        closed = c.delete(f"/v1/sessions/{session}").json()
    assert body["rewards"] == [1.0]
    assert body["provenance"]["code"]["sandbox_image"] == image_id
    assert body["provenance"]["code"]["sandbox_runtime"] == default_runtime
    assert listed["code"] == body["provenance"]["code"]  # the list names the image too
    block = ran["provenance"]
    assert block["sandbox_image"] == image_id and block["runtime"] == default_runtime
    assert set(block) == {"version", "code", "settings", "runtime", "sandbox_image",
                          "fingerprint"}
    assert cells["provenance"] == turn["provenance"] == block
    for answer in (created, got, mine, turn["session"], closed):
        assert answer["provenance"] == block, answer
    assert ran["status"] == cells["status"] == turn["status"] == "Success"
    parsed = sandbox_fusion.RunCodeResponse(**ran)
    assert parsed.run_result.stdout == "42\n"  # type: ignore[union-attr]
    assert sandbox_fusion.RunJupyterResponse(**cells).cells[0].display == [
        {"text/plain": "42"}]



def test_a_runtime_left_to_the_engine_is_the_one_its_containers_run_under(
        extra_engine, tmp_path: Path) -> None:
    """With the runtime setting unset the engine's default runtime runs the containers, and
    an operator may have made it gVisor's: the blocks of /run_code and of a session name it
    (they said runc whatever ran), as the engine reports the container's."""
    if extra_engine.runsc is None:
        message = "gVisor's runsc is not installed; run: bash sandbox/ensure_runsc.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    env = {"REWARD_SERVER_SANDBOX_DOCKER_HOST": extra_engine.host}
    with extra_engine.default_runtime("runsc"), run_server(tmp_path, env=env) as srv, \
            httpx.Client(base_url=srv.url, timeout=120) as c:
        wait_for_sandbox(srv.url)
        ran = c.post("/run_code", json={"code": "print(6 * 7)", "language": "python"}).json()
        session = c.post("/v1/sessions", json={}).json()
        running = extra_engine.sandbox_containers(running=True)
        inspected = extra_engine.docker("inspect", "--format", "{{.HostConfig.Runtime}}",
                                        *running).stdout.split()
        c.delete(f"/v1/sessions/{session['session_id']}")
    assert ran["status"] == "Success" and ran["run_result"]["stdout"] == "42\n", ran
    assert set(inspected) == {"runsc"}, inspected  # what the engine runs them under
    assert ran["provenance"]["runtime"] == "runsc"
    assert session["provenance"]["runtime"] == "runsc"


def _tagged_and_rebuilt(tag: str) -> tuple[str, str]:
    """The sandbox image as ``tag:run`` (the server's), and a build of it that differs only
    by a label as ``tag:rebuilt`` (what a rebuild under the tag makes): their Docker ids."""
    rebuilt = subprocess.run(["docker", "build", "-q", "-t", f"{tag}:rebuilt", "-"],
                             input=f"FROM {IMAGE}\nLABEL verifiable-rewards.test={tag}\n",
                             capture_output=True, text=True, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr
    subprocess.run(["docker", "tag", IMAGE, f"{tag}:run"], check=True, timeout=120)
    old_id, new_id = (subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", name],
                                     capture_output=True, text=True, check=True,
                                     timeout=120).stdout.strip()
                      for name in (f"{tag}:run", f"{tag}:rebuilt"))
    return old_id, new_id


def test_a_session_names_its_own_containers_image_after_a_rebuild(docker_ready: None,
                                                                   tmp_path: Path) -> None:
    """An image rebuilt under the server's tag is in new containers, not in a session's,
    which keeps the one it was made of: the session's answers name that one (its cells' run
    named whatever the pool made last), while the pool's block names the new one."""
    tag = f"vr-provenance-test-{os.getpid()}"
    old_id, new_id = _tagged_and_rebuilt(tag)
    try:
        env = {"REWARD_SERVER_SANDBOX_IMAGE": f"{tag}:run"}
        with run_server(tmp_path, env=env) as srv, \
                httpx.Client(base_url=srv.url, timeout=120) as c:
            wait_for_sandbox(srv.url)
            session = c.post("/v1/sessions", json={}).json()
            assert session["provenance"]["sandbox_image"] == old_id
            subprocess.run(["docker", "tag", f"{tag}:rebuilt", f"{tag}:run"], check=True,
                           timeout=120)
            other = c.post("/v1/sessions", json={}).json()["session_id"]  # replaced: new
            eventually(lambda: {v["name"]: v["provenance"] for v in c.get(
                "/v1/verifiers").json()["verifiers"]}["code"]["sandbox_image"] == new_id,
                what="the pool makes a container of the rebuilt image")
            c.delete(f"/v1/sessions/{other}")
            turn = c.post(f"/v1/sessions/{session['session_id']}/run",
                          json={"code": "6 * 7"}).json()
            got = c.get(f"/v1/sessions/{session['session_id']}").json()
    finally:
        subprocess.run(["docker", "rmi", f"{tag}:run", f"{tag}:rebuilt"], capture_output=True,
                       timeout=120)
    assert turn["status"] == "Success", turn
    assert turn["provenance"] == got["provenance"] == session["provenance"]
    assert turn["provenance"]["sandbox_image"] == old_id


def test_a_result_names_the_image_that_ran_it_after_a_rebuild(docker_ready: None,
                                                              tmp_path: Path) -> None:
    """Once the pool has made a container of an image rebuilt under the server's tag, its
    warm containers of the old image still serve: a /run_code answer names the image of the
    container that ran the program (its hostname is that container's id), not the pool's
    newest; a code verdict cached from before names the image it was computed in, in
    /v1/verify and /v1/rewards alike, not the image the pool makes now."""
    tag = f"vr-provenance-ran-{os.getpid()}"
    old_id, new_id = _tagged_and_rebuilt(tag)
    token = f"{os.getpid()}-{os.urandom(4).hex()}"
    item = {"response": "print(input())", "tests": [{"input": token, "output": token}]}
    probe = {"code": "import socket, time; time.sleep(1); print(socket.gethostname())",
             "language": "python"}
    ran: list[tuple[str, str]] = []  # (the block's image, the image of the container that ran)
    try:
        env = {"REWARD_SERVER_SANDBOX_IMAGE": f"{tag}:run", "REWARD_SERVER_SANDBOX_POOL_SIZE": "2"}
        with run_server(tmp_path, env=env) as srv, \
                httpx.Client(base_url=srv.url, timeout=120) as c:
            wait_for_sandbox(srv.url)
            before = c.post("/v1/verify/code", json={"items": [item]}).json()
            assert before["results"][0]["score"] == 1.0, before
            assert before["provenance"]["sandbox_image"] == old_id
            subprocess.run(["docker", "tag", f"{tag}:rebuilt", f"{tag}:run"], check=True,
                           timeout=120)
            session = c.post("/v1/sessions", json={}).json()  # its container is replaced
            eventually(lambda: {v["name"]: v["provenance"] for v in c.get(
                "/v1/verifiers").json()["verifiers"]}["code"]["sandbox_image"] == new_id,
                what="the pool makes a container of the rebuilt image")
            with httpx.Client(base_url=srv.url, timeout=120) as d:  # both warm containers
                with ThreadPoolExecutor(2) as pool:
                    answers = list(pool.map(lambda client: client.post(
                        "/run_code", json=probe).json(), (c, d)))
            for answer in answers:
                assert answer["status"] == "Success", answer
                host = answer["run_result"]["stdout"].strip()
                image = subprocess.run(["docker", "inspect", "-f", "{{.Image}}", host],
                                       capture_output=True, text=True, timeout=120).stdout.strip()
                ran.append((answer["provenance"]["sandbox_image"], image))
            cached = c.post("/v1/verify/code", json={"items": [item]}).json()
            mixed = c.post("/v1/rewards", json={"items": [{"verifier": "code", **item}]}).json()
            c.delete(f"/v1/sessions/{session['session_id']}")
    finally:
        subprocess.run(["docker", "rmi", f"{tag}:run", f"{tag}:rebuilt"], capture_output=True,
                       timeout=120)
    assert all(image in (old_id, new_id) for _, image in ran), ran
    assert all(block == image for block, image in ran), ran
    assert cached["results"][0]["score"] == 1.0
    assert cached["provenance"] == before["provenance"]  # computed there, before the rebuild
    assert mixed["provenance"]["code"] == before["provenance"]
