"""reasoning_gym's scorers run in the sandbox, and the sandbox holds on its own: with the
deny-list guard turned off (``REWARD_SERVER_REASONING_GYM_GUARD=false``), answers that make
the library run Python (SymPy's lambdify through ``DeferredVector``, ``eval``, ``sympify``)
do run it, in a scorer child, and reach nothing on the host, nothing of another caller, and
nothing of a later chunk. Under runc and under gVisor."""

from __future__ import annotations

import ast
import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import SandboxRuntime, ServerProcess, run_server
from tests.helpers.code_answers import EVAL_TASKS, PAYLOADS
from tests.helpers.probes import READS, WRITES

reasoning_gym = pytest.importorskip("reasoning_gym")

CANARY = "zqx-canary-5d1e0c7a9b"  # in the server's environment: no answer may read it


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory,
        sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
    """One container; the guard off, so only the sandbox stands between an answer and us."""
    env = {**sandbox_runtime.env, "REWARD_SERVER_SANDBOX_POOL_SIZE": "1",
           "REWARD_SERVER_REASONING_GYM_GUARD": "false", "REWARD_SERVER_CACHE_SIZE": "4096",
           "REWARD_SERVER_REASONING_GYM_TIMEOUT_S": "10", "VR_TEST_CANARY": CANARY}
    with run_server(tmp_path_factory.mktemp(f"scorer-{sandbox_runtime.name}"), env=env,
                    startup_s=120) as server:
        yield server


def post(srv: ServerProcess, items: list[dict[str, Any]], address: str = "127.0.0.1"
         ) -> list[dict[str, Any]]:
    """``address``: the client's own (another loopback address is another caller)."""
    transport = httpx.HTTPTransport(local_address=address)
    with httpx.Client(transport=transport, timeout=600) as client:
        r = client.post(srv.url + "/v1/verify/reasoning_gym",
                        content=json.dumps({"items": items}, default=str),
                        headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert CANARY not in r.text
    return r.json()["results"]


def entry(task: str) -> dict[str, Any]:
    return reasoning_gym.create_dataset(task, size=1, seed=5)[0]


def lambdify_payload(code: str) -> str:
    """The answer that made SymPy's ``lambdify`` exec ``code`` in the scoring worker: a
    ``DeferredVector`` whose name lands in a ``def`` line (evalf -> hypsum -> lambdify)."""
    blob = base64.b64encode(code.encode()).decode()
    name = f"x=(exec(__import__('base64').b64decode('{blob}').decode(), {{}}))"
    return f'Sum(2**(-DeferredVector("{name}")), (DeferredVector("{name}"), 0, oo)) > 0'


def item(answer: str, task: str) -> dict[str, Any]:
    return {"response": f"<answer>{answer}</answer>", "entry": entry(task)}


# What the payload does in the scorer child, reported through the one channel it has: an
# exception the scorer passes on (SystemExit), whose text comes back as the item's detail
PROBE = f"""
import json, os, socket
def look():
    found = {{"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd()}}
    status = open("/proc/self/status").read()
    found["caps"] = [l.split()[1] for l in status.splitlines() if l.startswith("CapEff")][0]
    found["lo"] = sorted(os.listdir("/sys/class/net")) == ["lo"]
    connected = []
    if found["lo"]:  # nothing but loopback: no packet can leave, whatever the address
        for host in ("127.0.0.1", "192.0.2.1"):
            try:
                socket.create_connection((host, PORT), timeout=1).close()
                connected.append(host)
            except OSError:
                pass
    found["connected"] = connected
    wrote = []
    for path in {WRITES!r}:
        try:
            with open(path, "ab") as f:
                f.write(b"x")
            wrote.append(path)
        except OSError:
            pass
    found["wrote"] = wrote
    found["read"] = []
    for path in {READS!r}:
        try:
            with open(path, "rb") as f:
                if b"{CANARY}" in f.read(1 << 16):
                    found["read"].append("CANARY " + path)
                elif path != "/proc/1/environ":
                    found["read"].append(path)
        except OSError:
            pass
    servers = [p for p in os.listdir("/proc") if p.isdigit() and os.stat(f"/proc/{{p}}").st_uid == 0
               and "scorer_server" in open(f"/proc/{{p}}/cmdline").read()]
    found["server"] = len(servers)
    for what in ("environ", "mem"):
        for pid in servers:
            try:
                data = open(f"/proc/{{pid}}/{{what}}", "rb").read(1 << 16)
                found["read"].append(("CANARY " if b"{CANARY}" in data else "") + "server "
                                     + what)
            except OSError:
                pass
    open("mine.txt", "w").write("x")
    return found
try:
    found = look()
except Exception as exc:  # a probe that fails says how
    found = {{"error": repr(exc)}}
raise SystemExit("PROBE" + json.dumps(found))
"""


def probe(srv: ServerProcess) -> dict[str, Any]:
    port = srv.url.rsplit(":", 1)[1]
    (result,) = post(srv, [item(lambdify_payload(PROBE.replace("PORT", port)),
                                "polynomial_multiplication")])
    raised = re.search(r"SystemExit\((.*)\)$", result["detail"] or "")
    assert raised, result  # the payload ran: the guard is off, the sandbox alone holds
    said = ast.literal_eval(raised.group(1))
    assert said.startswith("PROBE"), said
    return json.loads(said.removeprefix("PROBE"))


def test_a_scorer_child_runs_as_the_candidate_and_reaches_nothing(
        srv: ServerProcess, sandbox_runtime: SandboxRuntime) -> None:
    found = probe(srv)
    assert (found["uid"], found["gid"], found["caps"]) == (10001, 10001, "0000000000000000")
    assert found["cwd"].startswith("/work/")  # its chunk's own work dir
    assert found["lo"] and found["connected"] == []
    assert found["wrote"] == []  # the read-only root, root's dirs, /proc/1/mem
    # gVisor lets any uid read a process's environ (probes.py): PID 1's holds the image's
    # variables, the scorer's fork server's PATH, LANG and its cache dir; the server's own
    # (here the canary) are nowhere in the container. Memory stays closed under both.
    assert found["server"] == 1  # root's, non-dumpable
    gvisor = sandbox_runtime.name == "runsc"
    assert found["read"] == (["server environ"] if gvisor else []), found


def test_code_in_answers_never_runs_on_the_host(srv: ServerProcess, tmp_path: Path) -> None:
    """Every payload of the guard's tests, and the lambdify one, aimed at a file on the host:
    none appears (each ran in its scorer child, where that path is not even there)."""
    items, markers = [], []
    for task in EVAL_TASKS:
        for k, payload in enumerate(PAYLOADS):
            markers.append(tmp_path / f"{task}-{k}")
            items.append(item(payload.format(marker=markers[-1]), task))
    for task in ("polynomial_multiplication", "simple_integration", "intermediate_integration"):
        markers.append(tmp_path / f"{task}-lambdify")
        items.append(item(lambdify_payload(f"open({str(markers[-1])!r}, 'w').write('x')"),
                          task))
    results = post(srv, items)
    assert all(r["status"] in ("ok", "error") for r in results), results
    assert not [m.name for m in markers if m.exists()]
    assert not list(tmp_path.iterdir())


PATCH = """
import sys
for name, module in list(sys.modules.items()):
    if name.startswith("reward_server") and hasattr(module, "score_one"):
        module.score_one = lambda task, answer, entry, config="null": ("ok", 1.0, None)
    if name.startswith("reward_server") and hasattr(module, "score"):
        module.score = lambda *args, **kwargs: 1.0
for path in ("/opt/scorers/src/reward_server/verifiers/reasoning_gym/library.py",
             "/opt/scorers/lib/sitecustomize.py", "/dev/shm/sitecustomize.py"):
    try:
        open(path, "a").write("\\nraise SystemExit('patched')\\n")
    except OSError:
        pass
"""


def test_a_scorer_a_payload_patched_pays_nothing_after_its_chunk(srv: ServerProcess) -> None:
    """The payload patches the scorer in its process and tries to leave a file behind. Its
    own chunk is its to spoil (a forged 1); the next chunk of the same caller, and another
    caller, score a wrong answer 0, in a process forked afresh."""
    task = "polynomial_multiplication"
    wrong = item("x + 12345", task)
    spoiled = post(srv, [item(lambdify_payload(PATCH), task), wrong])
    # the compromised chunk pays its own items (the forged 1); a chunk's turn (a second) that
    # a loaded machine ends between the two puts the wrong answer in a fresh chunk: 0
    assert spoiled[1]["score"] in (1.0, 0.0), spoiled
    assert post(srv, [item("x + 54321", task)])[0]["score"] == 0.0  # the next chunk
    # another caller, with the answer the spoiled chunk was paid for: not from its cache
    other = post(srv, [wrong], address="127.0.0.2")[0]
    assert (other["status"], other["score"]) == ("ok", 0.0), other
    assert post(srv, [item(entry(task)["answer"], task)])[0]["score"] == 1.0
