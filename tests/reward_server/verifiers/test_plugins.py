"""The README's worked example: the exact_match plug-in, found through its entry point
exactly as pip installs it, adds an endpoint and works in mixed batches; and what the core's
pipeline gives a plug-in that supplies only ``check`` (reward_server/pipeline.py): worker
processes under its limits, a fair share between callers, metrics, the one null rule."""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil
import pytest

from reward_server.testing import PROXY_SETTINGS, A, B, as_caller
from reward_server.verifiers import PluginError, Verifier, register_verifier
from tests.conftest import BUILT_IN_VERIFIERS, ROOT, run_server
from tests.helpers.metrics import metric

EXAMPLE = ROOT / "examples" / "exact_match_verifier"


def _fake_install(site: Path) -> None:
    """What ``pip install ./examples/exact_match_verifier`` writes for the entry point."""
    info = site / "exact_match_verifier-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: exact-match-verifier\n"
                                   "Version: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[reward_server.verifiers]\nexact_match = exact_match_verifier:ExactMatchVerifier\n")


def test_entry_point_plugin_adds_an_endpoint(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_install(site)
    path = os.pathsep.join([str(site), str(EXAMPLE), os.environ.get("PYTHONPATH", "")])
    with run_server(tmp_path, env={"PYTHONPATH": path}) as srv:
        with_plugin = sorted([*BUILT_IN_VERIFIERS, "exact_match"])
        assert httpx.get(srv.url + "/healthz", timeout=60).json()["verifiers"] == with_plugin
        r = httpx.post(srv.url + "/v1/verify/exact_match", json={"items": [
            {"response": "thinking...\nParis", "answer": "paris"},
            {"response": "Paris", "answer": "paris", "case_sensitive": True},
            {"response": "   ", "answer": "x"},
        ]}, timeout=60)
        assert [x["score"] for x in r.json()["results"]] == [1.0, 0.0, 0.0]
        assert r.json()["results"][2]["status"] == "empty"
        r = httpx.post(srv.url + "/v1/rewards", json={"items": [
            {"verifier": "math", "response": "\\boxed{2}", "answer": "2"},
            {"verifier": "exact_match", "response": "yes", "answer": "yes"},
        ]}, timeout=60)
        assert r.json()["rewards"] == [1.0, 1.0]
        names = [v["name"] for v in httpx.get(srv.url + "/v1/verifiers", timeout=60).json()["verifiers"]]
        assert names == with_plugin
        r = httpx.post(srv.url + "/v1/verify/exact_match", json={"items": [{"response": "x"}]}, timeout=60)
        result = r.json()["results"][0]  # a plug-in's bad item is refused like any other
        assert result["status"] == "invalid_item" and "items[0].answer" in result["detail"]
        # counted on /metrics by the core, as the built-ins' items are
        items = r'reward_items_total\{status="%s",verifier="exact_match"\}'
        assert metric(srv.url, items % "ok") == 3 and metric(srv.url, items % "empty") == 1
        assert metric(srv.url, r'reward_item_seconds_count\{verifier="exact_match"\}') == 4


def test_a_plugins_settings_section_is_a_flag_and_reaches_it(tmp_path: Path) -> None:
    """Its own section: in ``--help``, set by flag or environment, handed to the verifier."""
    import subprocess
    import sys

    site = tmp_path / "site"
    _fake_install(site)
    path = os.pathsep.join([str(site), str(EXAMPLE), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-m", "reward_server.cli", "--help"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": path})
    assert "--exact-match-case-sensitive" in out.stdout, out.stdout + out.stderr
    items = [{"response": "Paris", "answer": "paris"},
             {"response": "Paris", "answer": "paris", "case_sensitive": False}]
    env = {"PYTHONPATH": path, "REWARD_SERVER_EXACT_MATCH_CASE_SENSITIVE": "true"}
    with run_server(tmp_path / "env", env=env) as srv:
        r = httpx.post(srv.url + "/v1/verify/exact_match", json={"items": items}, timeout=60)
        assert [x["score"] for x in r.json()["results"]] == [0.0, 1.0]
    with run_server(tmp_path / "flag", env={"PYTHONPATH": path},
                    args=["--exact-match-case-sensitive", "true"]) as srv:
        r = httpx.post(srv.url + "/v1/verify/exact_match", json={"items": items}, timeout=60)
        assert [x["score"] for x in r.json()["results"]] == [0.0, 1.0]


def test_plugins_setting_loads_a_class_by_path(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(EXAMPLE),
           "REWARD_SERVER_PLUGINS": '["exact_match_verifier:ExactMatchVerifier"]'}
    with run_server(tmp_path, env=env) as srv:
        assert "exact_match" in httpx.get(srv.url + "/healthz", timeout=60).json()["verifiers"]


def test_registry_rejects_malformed_plugins() -> None:
    with pytest.raises(PluginError, match="not a Verifier"):
        register_verifier(object)  # type: ignore[arg-type]

    class BadName(Verifier):
        name = "Bad Name"

    with pytest.raises(PluginError, match="must match"):
        register_verifier(BadName)


def test_missing_plugin_is_one_readable_line() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "reward_server.cli", "--plugins", '["nowhere:Nothing"]'],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "reward-server: cannot load plugin 'nowhere:Nothing': No module named 'nowhere'")


HOSTILE = {"REWARD_SERVER_PLUGINS": '["tests.helpers.hostile_plugin:HostileVerifier"]',
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           **PROXY_SETTINGS}


def _hostile(srv, responses: list[str], caller: str | None = None) -> list[dict]:
    r = httpx.post(srv.url + "/v1/verify/hostile", headers=as_caller(caller), timeout=120,
                   json={"items": [{"response": x} for x in responses]})
    assert r.status_code == 200, r.text
    return r.json()["results"]


CONTAINED = [  # what the check does on the response: (score, status)
    ("fine", 1.0, "ok"), ("loop", 0.0, "timeout"), ("memory", 0.0, "memory_limit"),
    ("raise", 0.0, "check_failed"), ("exit", 0.0, "check_failed"),
    ("interrupt", 0.0, "check_failed"), ("generator exit", 0.0, "check_failed"),
    ("cancelled", 0.0, "check_failed"),  # not a lost task: no null for it
    ("import error", 0.0, "check_failed"),  # not "the worker cannot import its code"
    ("two arguments", 0.0, "check_failed"),  # an exception that cannot be unpickled
    ("unprintable", 0.0, "check_failed"), ("os exit", 0.0, "check_failed"),
    ("wrong type", 0.0, "check_failed"), ("nan", 0.0, "ok"),  # no score is a 0, not a null
    ("seven", 0.0, "check_failed"), ("claims not run", 0.0, "check_failed"),
    ("huge", 0.0, "check_failed"), ("flood", 1.0, "ok"),
    # a process could outlive the item or spin on another caller's CPU; a SIGKILL of its own
    # would pass for the OOM killer's, which is run again and then left unscored
    ("fork", 0.0, "check_failed"), ("exec", 0.0, "check_failed"),
    ("kill worker", 0.0, "check_failed"), ("kill self", 0.0, "check_failed"),
    ("kill group", 0.0, "check_failed"), ("leave group", 0.0, "check_failed"),
    ("spinning threads", 0.0, "check_failed"),  # no thread: one CPU's share at most
    ("spinning thread", 0.0, "check_failed"),
    ("memfd", 0.0, "check_failed"),  # memory its address-space cap would not count
    ("forge unavailable", 0.0, "check_failed"),  # a null it would buy
    ("timer kill self", 0.0, "check_failed"),  # a timer's SIGKILL: a null it would buy
    ("owner kill group", 0.0, "check_failed"),  # the kernel's SIGKILL to the server's group
    ("lower cpu limit", 0.0, "check_failed"),  # its SIGKILL would pass for one from outside
    ("secret memfd", 0.0, "check_failed"),
    ("log inject", 0.0, "check_failed"),  # its lines in the server's log: none
    ("memory tag", 0.0, "memory_limit"),  # its 64 KB kept as the reason: 300 characters
]


def test_whatever_a_check_does_costs_its_item_a_zero_and_nothing_else(tmp_path: Path) -> None:
    """Each item's check runs in a child of its own under the plug-in's limits: a 0 with a
    status for that item, never a null it could buy, its neighbours scored, the server up,
    and no copy of a memory kill run again."""
    with run_server(tmp_path, env=HOSTILE) as srv:
        results = _hostile(srv, [response for response, _, _ in CONTAINED])
        assert [(r["score"], r["status"]) for r in results] == [
            (score, status) for _, score, status in CONTAINED]
        detail = {response: r.get("detail", "") for (response, _, _), r in zip(
            CONTAINED, results, strict=True)}
        assert "ValueError" in detail["raise"] and "float" in detail["wrong type"]
        assert "_NeedsTwoArguments" in detail["two arguments"]
        assert "only the server gives" in detail["claims not run"]
        assert "PermissionError" in detail["fork"] and "PermissionError" in detail["kill self"]
        assert max(len(text) for text in detail.values()) <= 300
        again = _hostile(srv, ["memory"])[0]  # no load causes that: remembered at once
        assert (again["status"], "remembered" in again["detail"]) == ("memory_limit", True)
        items = r'reward_items_total\{status="%s",verifier="hostile"\}'
        assert metric(srv.url, items % "timeout") == 1
        assert metric(srv.url, items % "memory_limit") == 3
        assert httpx.get(srv.url + "/healthz", timeout=60).status_code == 200
        log = srv.log.read_text()
        assert "admin token=forged" not in log  # the flood reached no log
        assert not any(line.startswith("FORGED-LINE") for line in log.splitlines())
        assert log.count("FORGED-LINE") <= 10  # what one quoted line shows, at most


def test_nothing_a_check_leaves_reaches_the_next_item(tmp_path: Path) -> None:
    """A caller's items leave 200 MB in a module and a patched class; another caller's
    honest items that follow, in the same worker, are scored as on a fresh one, and no
    process of theirs is left."""
    with run_server(tmp_path, env=HOSTILE) as srv:
        for attack in ("hoard", "patch"):
            assert _hostile(srv, [attack], A)[0]["status"] == "ok"
        honest = _hostile(srv, ["needs 100 MB", "slow b", "wrong answer"], B)
        assert [(r["score"], r["status"]) for r in honest] == [(1.0, "ok")] * 3
        # "wrong answer" scores 1 here by design; the patch would have made "raise" a 1 too
        assert _hostile(srv, ["raise"], B)[0]["status"] == "check_failed"
        # this server's processes only: the machine may run other servers with plug-ins
        names = Counter(p.name() for p in psutil.Process(srv.proc.pid).children(recursive=True))
        # the worker and its spare, and a zygote each; no check's process left
        assert names["hostile-check"] <= 2 and names["check-zygote"] <= 2, names
        assert names["check-item"] == 0, names


def test_one_requests_results_are_bounded_in_all(tmp_path: Path) -> None:
    """Each result may be up to 64 KB; a request's may hold 16 MB in all (the fifth audit
    held 720 MB in the server with 256 results of a megabyte), shared out evenly between
    its items: an item whose result is over its share is 0, ``check_failed``, whatever
    finished first (the seventh audit's large results, done first, left the request's
    honest items no room: their 0s)."""
    with run_server(tmp_path, env=HOSTILE) as srv:
        bulky = [f"bulky {k}" for k in range(280)]  # 60 KB each: over 16 MB / 300
        results = _hostile(srv, bulky + [f"honest {k}" for k in range(20)])
        assert all(r["score"] == 0.0 and "its share" in r["detail"] for r in results[:280])
        assert [(r["score"], r["status"]) for r in results[280:]] == [(1.0, "ok")] * 20
        small = _hostile(srv, bulky[:200])  # 12 MB: each within its share
        assert [r["status"] for r in small] == ["ok"] * 200


def test_statuses_a_completion_makes_up_do_not_grow_the_metrics(tmp_path: Path) -> None:
    """A check whose completion chooses its status (the eighth audit: 15 MB more server
    memory a request, and a /metrics of 150 MB that held the loop on each scrape): past a
    verifier's first statuses, and any long or odd one, each is counted as ``other``."""
    with run_server(tmp_path, env=HOSTILE) as srv:
        results = _hostile(srv, [f"status flood {k}" for k in range(100)])
        assert len({r["status"] for r in results}) == 100
        assert all(r["score"] == 0.0 for r in results)
        text = httpx.get(srv.url + "/metrics", timeout=60).text
        assert len(text) < 200_000 and "sssss" not in text
        assert metric(srv.url, r'reward_items_total\{status="other",verifier="hostile"\}') == 100


def _spied(srv, secret_file: Path, token: str) -> dict:
    """What a check taken over by its completion found of the server, its files and a
    SysV segment anyone may attach (IPC_PRIVATE, mode 666)."""
    libc = ctypes.CDLL(None, use_errno=True)
    shm_id = libc.shmget(0, 4096, 0o1000 | 0o666)  # IPC_CREAT
    assert shm_id >= 0, os.strerror(ctypes.get_errno())
    try:
        r = httpx.post(srv.url + "/v1/verify/hostile", timeout=120,
                       headers={"Authorization": f"Bearer {token}"},
                       json={"items": [{"response": f"spy {srv.proc.pid} {shm_id} {secret_file}"}]})
    finally:
        libc.shmctl(shm_id, 0, None)  # IPC_RMID
    assert r.status_code == 200, r.text
    assert token not in r.text
    return json.loads(r.json()["results"][0]["info"])


# each probe's errno: EACCES where a file is out of reach, EPERM where a call is refused
CUT_OFF = {"server_environ": 13, "secret_file": 13, "write_tmp": 13, "write_own_tmp": 13,
           "async_signal": 1, "async_owner": 1, "timer": 1, "keyring": 1, "namespace": 1,
           "socketpair": 1, "worker_proc": "0", "inotify": 1, "aio": 1, "socket": 1,
           "checkout_root": 13, "sysv_segment": 1,
           "signal_server": 1, "signal_worker": 1, "server_limits": 1, "fork": 1}


def test_a_check_reaches_nothing_of_the_server(open_tmp_path: Path) -> None:
    """The server's environment (its API token), a file it reads, the network, a signal or
    a limit set on the server or on the check's own worker, a file written, a process
    started: each refused to a check whatever its completion makes it do."""
    token = secrets.token_hex(16)
    secret_file = open_tmp_path / "credential"
    secret_file.write_text(token)
    secret_file.chmod(0o600)
    with run_server(open_tmp_path, env={**HOSTILE, "REWARD_SERVER_API_TOKEN": token}) as srv:
        assert _spied(srv, secret_file, token) == CUT_OFF
        assert httpx.get(srv.url + "/healthz", timeout=60).status_code == 200


def test_a_non_root_servers_checks_are_cut_off_all_the_same(open_tmp_path: Path) -> None:
    """The shipped image and the Kubernetes manifests run the server as uid 10002, which
    its workers share (no uid of their own without root): the same probes are refused."""
    if os.geteuid() != 0:
        pytest.skip("starting the server as another user needs root")
    token = secrets.token_hex(16)
    secret_file = open_tmp_path / "credential"
    secret_file.write_text(token)
    secret_file.chmod(0o600)
    os.chown(secret_file, NON_ROOT, NON_ROOT)  # the server's user reads it; its checks not
    with run_server(open_tmp_path, env={**HOSTILE, "REWARD_SERVER_API_TOKEN": token},
                    user=NON_ROOT) as srv:
        assert _spied(srv, secret_file, token) == CUT_OFF
        assert httpx.get(srv.url + "/healthz", timeout=60).status_code == 200
        assert "share its uid" in srv.log.read_text()  # said once, at the first worker


NON_ROOT = 10002  # the shipped image's "reward" user


def test_a_plugins_workers_are_shared_fairly_between_callers(tmp_path: Path) -> None:
    """One worker; caller A's batch of five slow items is queued first, then B sends one:
    B's item takes the worker next, not after A's batch (the fair gate of the slow lane)."""
    with run_server(tmp_path, env=HOSTILE) as srv:
        _hostile(srv, ["warm"])  # the worker started
        ended: list[str] = []
        a = threading.Thread(target=lambda: (_hostile(srv, [f"slow a{k}" for k in range(5)], A),
                                             ended.append("A")))
        a.start()
        waiting = r'reward_queue_items_waiting\{verifier="hostile"\}'
        deadline = time.monotonic() + 60
        while metric(srv.url, waiting) < 4:  # A's first item runs, four wait
            assert time.monotonic() < deadline, "A's items never queued"
            time.sleep(0.05)
        assert _hostile(srv, ["slow b"], B)[0]["score"] == 1.0
        ended.append("B")
        a.join(timeout=120)
        assert ended == ["B", "A"]


def test_a_verifier_with_neither_check_nor_verify_is_refused() -> None:
    from tests.helpers.hostile_plugin import HostileItem, HostileResult

    class Empty(Verifier):
        name = "empty"
        item_model = HostileItem
        result_model = HostileResult

    with pytest.raises(PluginError, match="neither check nor verify"):
        register_verifier(Empty)
