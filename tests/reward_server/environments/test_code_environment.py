"""The code-interpreter environment (``/v1/environments/code``) driven by OpenEnv's own client
over its WebSocket transport, against the real server on loopback and the real Docker engine,
under runc and gVisor: an episode is a session (state kept between steps, a fresh
interpreter at reset, closed with the connection, each step naming the sandbox that ran it),
its caps are the sessions', bad input is a 4xx naming the field, a cell that loops, forks,
floods or eats memory is contained beside another caller's episode, and the isolation probes
(tests/helpers/probes.py) hold in a step as they do in a ``/v1/sessions`` cell."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from reward_server.environments.models import CodeAction
from tests.conftest import SandboxRuntime, ServerProcess, run_server, wait_for_sandbox
from tests.helpers import probes
from tests.helpers.environments import (
    CODE,
    all_removed,
    caller_headers,
    code_env,
    sessions_of,
)
from tests.helpers.sandbox_pool import assert_clean
from tests.helpers.waiting import eventually

# what the server does around the sandbox: under gVisor too only where marked isolation
pytestmark = [pytest.mark.usefixtures("docker_ready"), pytest.mark.host_side]

PER_CALLER, CONNECTIONS = 2, 3
SETTINGS = {"REWARD_SERVER_SANDBOX_POOL_SIZE": "2",
            "REWARD_SERVER_SANDBOX_SESSION_MAX_OPEN": "6",
            "REWARD_SERVER_SANDBOX_SESSION_MAX_PER_CALLER": str(PER_CALLER),
            "REWARD_SERVER_SANDBOX_SESSION_RESERVE": "0",
            "REWARD_SERVER_SANDBOX_SESSION_OUTPUT_LIMIT_BYTES": "65536",
            "REWARD_SERVER_OPENENV_MAX_PER_CALLER": str(CONNECTIONS),
            # 127.0.0.1 stands for a proxy: the callers it names are hosts elsewhere
            "REWARD_SERVER_FORWARDED_ALLOW_IPS": "127.0.0.1"}
OTHER = "198.51.100.7"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory,
        sandbox_runtime: SandboxRuntime) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp(f"code-env-{sandbox_runtime.name}"),
                    env={**sandbox_runtime.env, **SETTINGS}, startup_s=180) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        yield server


def step(env: Any, code: str, **action: Any) -> Any:
    """The observation of one cell."""
    return env.step(CodeAction(code=code, **action)).observation


def value(env: Any, code: str) -> str:
    observation = step(env, code)
    assert observation.status == "Success", observation
    return observation.display[0]["text/plain"]


@pytest.mark.isolation
def test_an_episode_keeps_state_and_ends_with_its_connection(srv: ServerProcess) -> None:
    with code_env(srv) as env:
        ready = env.reset().observation
        assert ready.status == "Ready" and ready.python.startswith("3.")
        first = step(env, "import math\nx = 41\nprint('hi')")
        assert first.status == "Success" and first.stdout == "hi\n" and first.display == []
        assert value(env, "x + 1") == "42" and value(env, "math.pi > 3") == "True"
        raised = env.step(CodeAction(code="x = 7\nraise ValueError('no')"))
        assert raised.observation.status == "Failed" and not raised.done
        assert raised.observation.error[0]["ename"] == "ValueError"
        assert value(env, "x") == "7"
        state = env.state()
        assert (state.step_count, state.session_state) == (5, "open")
        assert len(sessions_of(srv)) == 1  # the episode's interpreter is the caller's session
        env.reset()  # a new episode: a fresh interpreter, the old one closed
        assert step(env, "x").error[0]["ename"] == "NameError"
        assert len(sessions_of(srv)) == 1
    eventually(lambda: all_removed(srv, None), 60, "the episode's session closed with it")


@pytest.mark.isolation
def test_a_step_names_the_sandbox_that_ran_it(srv: ServerProcess) -> None:
    """A step's observation carries the sandbox's provenance block, the one /run_code and
    /v1/sessions runs answer with (as the verifier environment's carries the verifier's)."""
    r = httpx.post(srv.url + "/run_code", json={"code": "print(1)", "language": "python"},
                   timeout=120)
    assert r.status_code == 200, r.text
    expected = r.json()["provenance"]
    assert expected["fingerprint"] and expected["sandbox_image"], expected
    with code_env(srv) as env:
        assert env.reset().observation.provenance is None  # nothing ran yet
        assert step(env, "1 + 1").provenance == expected
        assert step(env, "1 / 0").provenance == expected  # a cell that raised too


@pytest.mark.isolation
def test_an_interpreter_that_dies_ends_the_episode(srv: ServerProcess) -> None:
    with code_env(srv) as env:
        env.reset()
        result = env.step(CodeAction(code="import os\nos._exit(3)"))
        assert result.done and result.observation.cell_status == "Error"
        assert "exited (exit code 3)" in result.observation.message
        with pytest.raises(RuntimeError, match="no interpreter: reset"):
            step(env, "1")
        env.reset()  # the next episode has one
        assert value(env, "1 + 1") == "2"


def test_the_session_idle_ttl_reaps_an_episode(srv: ServerProcess) -> None:
    with code_env(srv) as env:
        env.reset(idle_ttl_s=1)
        assert value(env, "1") == "1"
        eventually(lambda: all_removed(srv, None), 60, "the session's TTL ended it")
        with pytest.raises(RuntimeError, match=r"has ended \(expired\)"):
            step(env, "1")


def test_bad_input_is_refused_naming_the_field(srv: ServerProcess) -> None:
    with code_env(srv) as env:
        for reset, field in [({"language": "cpp"}, "language"),
                             ({"files": {"../x": "AA=="}}, "files['../x']"),
                             ({"bogus": 1}, "reset.bogus"),
                             ({"idle_ttl_s": -1}, "reset.idle_ttl_s"),
                             ({"episode_id": ["x"]}, "reset.episode_id")]:
            with pytest.raises(RuntimeError, match="Server error") as raised:
                env.reset(**reset)
            assert field in str(raised.value), (reset, raised.value)
        assert sessions_of(srv) == []  # no interpreter was started for a refused reset
        env.reset()
        with pytest.raises(RuntimeError, match="code: .*2097152") as raised:
            step(env, "#" * 3_000_000)
        assert value(env, "'still here'") == "'still here'"
    # OpenEnv's HTTP endpoints: each call an environment of its own, the same checks as 4xx
    with httpx.Client(base_url=srv.url + CODE, timeout=120) as http:
        r = http.post("/reset", json={"files": {"../x": "AA=="}})
        assert r.status_code == 422 and "files['../x']" in r.json()["detail"], r.text
        r = http.post("/step", json={"action": {"code": "1", "bogus": 2}})
        assert r.status_code == 422 and "action.bogus: " in r.json()["detail"], r.text
        r = http.post("/step", json={"action": {"code": "1"}})
        assert r.status_code == 410 and "reset() opens one" in r.json()["detail"], r.text
    eventually(lambda: all_removed(srv, None), 60, "every episode's session closed")


def test_caps_are_the_sessions_and_the_connections(srv: ServerProcess) -> None:
    """A caller's episodes hold its sessions (PER_CALLER), and its connections are capped
    apart (CONNECTIONS): past the first a reset is refused 429, past the second the
    handshake; another caller is not affected by either."""
    held = [code_env(srv, OTHER) for _ in range(CONNECTIONS)]
    try:
        for env in held:
            env.connect()
        for env in held[:PER_CALLER]:
            env.reset()
        with pytest.raises(RuntimeError, match="sandbox_session_max_per_caller"):
            held[PER_CALLER].reset()
        with pytest.raises(ConnectionError, match="HTTP 429"):
            code_env(srv, OTHER).connect()
        r = httpx.get(srv.url + CODE + "/health", headers=caller_headers(OTHER), timeout=60)
        assert r.status_code == 200  # the cap is on connections, not on requests
        with code_env(srv) as mine:
            mine.reset()
            assert value(mine, "2 + 2") == "4"
            assert len(sessions_of(srv, OTHER)) == PER_CALLER and len(sessions_of(srv)) == 1
        held[0].close()
        eventually(lambda: len(sessions_of(srv, OTHER)) == PER_CALLER - 1, 60, "one closed")
        # a closed session's container counts against the cap until it is removed (in its
        # caller's turn at the gate)
        eventually(lambda: all_removed(srv), 60, "the closed episodes' containers removed")
        held[PER_CALLER].reset()  # its place is free again
    finally:
        for env in held:
            env.close()
    eventually(lambda: all_removed(srv, OTHER), 60, "every episode's session closed")


HOSTILE: dict[str, tuple[str, dict[str, Any], str]] = {
    # name: (its caller, its reset, its cell); each within its session's limits
    "loop": ("192.0.2.1", {}, "while True:\n    pass"),
    "memory": ("192.0.2.2", {"memory_limit_MB": 128},
               "xs = []\nwhile True:\n    xs.append(bytearray(10 * 1024**2))"),
    "flood": ("192.0.2.3", {}, "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)"),
    "fork": ("192.0.2.4", {}, "import os\nwhile True:\n    os.fork()"),
}


@pytest.mark.isolation
def test_hostile_steps_are_contained_beside_another_episode(srv: ServerProcess) -> None:
    def hostile(name: str) -> tuple[Any, Any]:
        """Its cell's result, and the result (or the error) of a plain cell after it."""
        caller, reset, code = HOSTILE[name]
        with code_env(srv, caller) as env:
            env.reset(**reset)
            got = env.step(CodeAction(code=code, cell_timeout=3))
            try:
                after: Any = step(env, "1 + 1", cell_timeout=30)
            except RuntimeError as exc:
                after = exc
            return got, after

    with code_env(srv, OTHER) as benign, ThreadPoolExecutor(len(HOSTILE)) as threads:
        benign.reset()
        step(benign, "total = 0")
        futures = {name: threads.submit(hostile, name) for name in HOSTILE}
        for i in range(1, 11):  # answered right, step after step, while they run
            assert value(benign, f"total += {i}\ntotal") == str(i * (i + 1) // 2)
        got = {name: f.result() for name, f in futures.items()}
        assert value(benign, "total") == "55"
    loop, after = got["loop"]
    assert loop.observation.cell_status == "TimeLimitExceeded" and not loop.done
    assert after.display == [{"text/plain": "2"}]  # interrupted, the interpreter lives on
    memory, after = got["memory"]
    assert memory.observation.error[0]["ename"] == "MemoryError" and not memory.done
    assert after.display == [{"text/plain": "2"}]
    flood, after = got["flood"]
    assert flood.observation.cell_status == "Error" and len(flood.observation.stdout) == 65536
    assert "output limit of 65536" in flood.observation.message
    assert after.display == [{"text/plain": "2"}]
    fork, after = got["fork"]
    assert fork.observation.status == "Failed", fork
    if fork.done:  # the container's own limits took that interpreter down: that episode only
        assert isinstance(after, RuntimeError) and "no interpreter" in str(after)
    else:
        assert after.display == [{"text/plain": "2"}]
    eventually(lambda: all_removed(srv, *(c for c, _, _ in HOSTILE.values())), 60,
               "every hostile episode's session closed")
    assert_clean(srv)


@pytest.mark.isolation
def test_isolation_probes_hold_in_a_step(srv: ServerProcess) -> None:
    """The probes of the code verifier, /run_code and /v1/sessions, with their expectations:
    no network (not even the server's own port), nothing written or read outside the work
    dir, kill(-1) reaches nothing of root's, a child outliving its cell stays in its own
    episode's container (another caller's never meets it) and goes with it."""
    with code_env(srv) as env, code_env(srv, OTHER) as other:
        env.reset()
        other.reset()
        got = step(env, probes.network_probe(srv.url.rsplit(":", 1)[1]))
        assert got.stdout == probes.NETWORK_EXPECTED + "\n", got
        got = step(env, probes.FILESYSTEM_PROBE)
        assert got.stdout == probes.filesystem_expected(srv.runtime) + "\n", got
        step(env, "y = 2")  # kill(-1) before any child: with none, gVisor's raises
        killed = env.step(CodeAction(code=probes.KILL_EVERYTHING)).observation
        if probes.kill_everything_raises(srv.runtime):
            assert killed.error[0]["ename"] == "ProcessLookupError", killed
        else:
            assert killed.stdout == probes.KILL_EVERYTHING_EXPECTED + "\n", killed
        assert value(env, "y") == "2" and value(other, "'untouched'") == "'untouched'"
        got = step(env, probes.CHILD_OUTLIVES)
        assert got.stdout == probes.CHILD_OUTLIVES_EXPECTED + "\n", got
        assert all(c in step(env, probes.THEIR_PROCESSES).stdout for c in probes.CHILD_COMMANDS)
        theirs = step(other, probes.THEIR_PROCESSES).stdout
        assert theirs.split(" ", 1)[1] == "[]\n", theirs
    eventually(lambda: all_removed(srv, None, OTHER), 60, "both episodes' sessions closed")
    assert_clean(srv)
