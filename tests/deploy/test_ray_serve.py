"""The reward server as a Ray Serve application on a real local multi-node Ray cluster
(ray.cluster_utils.Cluster: a head and a worker node on this machine, each with its own
CPUs and a small object store): a mixed batch by URL, replicas on both nodes, a replica
killed mid-batch, autoscaling up and down, the handle path from a task on the cluster, a
node whose Docker engine is unreachable, and a node lost mid-batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
from ray.cluster_utils import Cluster  # noqa: E402

from reward_server.client import RewardClient  # noqa: E402
from reward_server.ray_serve import APP_NAME, REPLICA_ROUTE, app  # noqa: E402
from reward_server.testing import free_port, sandbox_containers  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.server, pytest.mark.slow]

MB = 1024 * 1024
# Serve's autoscaling metrics are pushed every 10 s by default: too slow for a test. The one
# proxy (all nodes share this host's ports) would prefer its own node's replica, as each
# node's proxy does in a real cluster; here requests must reach both.
SERVE_ENV = {"RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
             "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
             "RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0"}
NODE = {"num_cpus": 2, "object_store_memory": 80 * MB, "env_vars": SERVE_ENV}
# small replicas: one math worker, one warm container (plus the spare), quick reaping; only
# on nodes that declare an engine (as an operator would mark them)
SMALL = {"math_workers": "1", "sandbox_pool_size": "1", "reasoning_gym_workers": "1",
         "sandbox_reap_interval_s": "3", "ray_replica_cpus": "0.5",
         "ray_resources": '{"engine": 0.01}'}
NO_ENGINE = "unix:///tmp/vr-ray-no-engine.sock"  # no engine listens there


@dataclass
class RayCluster:
    cluster: Cluster
    url: str  # Serve's proxy on the head node
    nodes: dict[str, str]  # node id -> "head" / "worker"
    pids: set[int]  # every replica process seen, for the container check at teardown

    def deploy(self, name: str, route: str, **args: str) -> str:
        serve.run(app({**SMALL, **args}), name=name, route_prefix=route, blocking=False)
        return self.ready(name, route)

    def serve_run(self, name: str, route: str, **args: str) -> str:
        """As docs/deploy.md starts it: ``serve run ... reward_server.ray_serve:app k=v``."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("REWARD_SERVER_")}
        serve_cli = os.path.join(os.path.dirname(sys.executable), "serve")
        done = subprocess.run(
            [serve_cli, "run", "--non-blocking", "--address", self.cluster.address,
             "--name", name, "--route-prefix", route, "reward_server.ray_serve:app",
             *(f"{k}={v}" for k, v in {**SMALL, **args}.items())],
            env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return self.ready(name, route)

    def ready(self, name: str, route: str) -> str:
        _until(lambda: _status(name) == "RUNNING", 240, f"app {name} never ran")
        return self.url + route.rstrip("/")


def _status(name: str) -> str:
    found = serve.status().applications.get(name)
    return found.status if found is not None else "MISSING"


def _running_replicas(name: str) -> int:
    deployment = serve.status().applications[name].deployments["RewardServer"]
    return deployment.replica_states.get("RUNNING", 0)


def _until(ok: Callable[[], bool], timeout_s: float, message: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        assert time.monotonic() < deadline, message
        time.sleep(0.3)


@pytest.fixture(scope="module")
def cluster(docker_ready: None) -> Iterator[RayCluster]:
    port = free_port()
    # Ray's in-process node sets its own SIGTERM and SIGINT handlers (which sys.exit) and
    # leaves them after shutdown; later tests in this process expect their own.
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    cluster = Cluster()
    seen: set[int] = set()
    try:  # a node that fails to start still leaves the others to shut down
        cluster.add_node(**NODE, include_dashboard=False, resources={"head": 1, "engine": 1})
        cluster.add_node(**NODE, resources={"worker": 1, "engine": 1})
        ray.init(address=cluster.address, log_to_driver=False)
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        nodes = {n["NodeID"]: ("head" if "head" in n["Resources"] else "worker")
                 for n in ray.nodes() if n["Alive"]}
        yield RayCluster(cluster, f"http://127.0.0.1:{port}", nodes, seen)
    finally:
        try:  # (not connected, serve.shutdown would ray.init a cluster of its own)
            if ray.is_initialized():
                serve.shutdown()  # the replicas' lifespans remove their containers
        finally:
            ray.shutdown()
            cluster.shutdown()
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
    left = [c for pid in seen for c in sandbox_containers(owner_pid=pid)]
    assert not left, f"sandbox containers left behind: {left}"


@pytest.fixture(scope="module")
def rewards_url(cluster: RayCluster) -> str:
    """Two replicas (the 'code' workload caps one per node, so one on each), under the
    default name, which the handle path finds."""
    return cluster.serve_run(APP_NAME, "/", ray_min_replicas="2", ray_max_replicas="2")


def _replicas(url: str, pids: set[int], calls: int = 40) -> dict[str, dict[str, Any]]:
    """Which replicas answer at ``url``: their reports by node id."""
    with httpx.Client(timeout=30) as http:
        found = {}
        for _ in range(calls):
            report = http.get(url + REPLICA_ROUTE).raise_for_status().json()
            found[report["node_id"]] = report
            pids.add(report["pid"])
        return found


def _echo(token: str, sleep_s: float = 0.0) -> dict[str, Any]:
    program = f"import time\ntime.sleep({sleep_s})\nprint(input())" if sleep_s else "print(input())"
    return {"verifier": "code", "response": f"```python\n{program}\n```",
            "tests": [{"input": token, "output": token}]}


def _math(k: int, right: bool) -> dict[str, Any]:
    return {"verifier": "math", "response": f"\\boxed{{{k if right else k + 1}}}",
            "answer": str(k)}


def _batch(n: int, sleep_s: float = 0.0) -> tuple[list[dict[str, Any]], list[float]]:
    """``n`` items, each of its own value, math and code, right and wrong, with the reward
    each must get: an item scored twice or out of place shows as a wrong reward."""
    items, expected = [], []
    for k in range(n):
        right = k % 3 != 0
        if k % 2:
            items.append(_math(k, right))
        else:
            item = _echo(f"v{k}", sleep_s)
            if not right:
                item["tests"][0]["output"] = f"other{k}"
            items.append(item)
        expected.append(1.0 if right else 0.0)
    return items, expected


def test_mixed_batch_by_url_on_replicas_of_both_nodes(cluster: RayCluster, rewards_url: str):
    replicas = _replicas(rewards_url, cluster.pids)
    assert set(replicas) == set(cluster.nodes), replicas  # one replica on each node answers
    items, expected = _batch(24)
    with RewardClient(rewards_url, batch_size=4) as client:
        out = client.rewards(items)
        assert out.rewards == expected, out.results
        assert client.health()["verifiers"]


class _Recording(httpx.HTTPTransport):
    """The real transport, counting the answers that the client will retry, and saying when
    the first chunk has been answered (the batch is then under way on every replica)."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[str] = []
        self.answered = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = super().handle_request(request)
        except httpx.TransportError as exc:
            self.failures.append(type(exc).__name__)
            raise
        if response.status_code >= 500:
            self.failures.append(str(response.status_code))
        else:
            self.answered.set()
        return response


def _scored_through(url: str, fault: Callable[[], None], retry_for_s: float
                    ) -> tuple[Any, list[float], list[str]]:
    """32 slow items scored by a retrying client while ``fault`` strikes mid-batch: the
    client's answer, the rewards each item must get, and the failed answers it retried."""
    items, expected = _batch(32, sleep_s=0.5)
    transport = _Recording()
    box: dict[str, Any] = {}

    def score() -> None:
        with RewardClient(url, batch_size=2, max_concurrency=8, max_attempts=None,
                          retry_for_s=retry_for_s, backoff_s=0.2, transport=transport) as client:
            box["out"] = client.rewards(items)

    thread = threading.Thread(target=score)
    thread.start()
    # Strike once the first chunk is answered, not after a fixed delay: on a loaded machine
    # the batch may not have started by then, and a fault before it hits nothing. Eight
    # chunks are sent at once, so when one is back the other seven are in flight on both
    # replicas (each chunk's code item sleeps, so none is quick).
    assert transport.answered.wait(120), "no chunk was answered before the fault"
    fault()
    thread.join(retry_for_s + 60)
    assert not thread.is_alive()
    return box["out"], expected, transport.failures


def test_replica_killed_mid_batch_loses_and_repeats_nothing(cluster: RayCluster,
                                                             rewards_url: str):
    victim = next(r for r in _replicas(rewards_url, cluster.pids).values()
                  if cluster.nodes[r["node_id"]] == "worker")
    out, expected, failures = _scored_through(
        rewards_url, lambda: os.kill(victim["pid"], signal.SIGKILL), retry_for_s=120)
    assert failures, "the kill hit no request in flight"
    assert out.rewards == expected, out.results  # each item once, in its place
    deadline = time.monotonic() + 120
    while True:  # Serve notices the death at its next health check and starts a new one
        after = _replicas(rewards_url, cluster.pids, calls=10)
        if set(after) == set(cluster.nodes):
            break
        assert time.monotonic() < deadline, f"the replica was not replaced: {after}"
        time.sleep(1)
    assert victim["replica_id"] not in {r["replica_id"] for r in after.values()}


def _score_on_the_cluster(items: list[dict[str, Any]]) -> dict[str, Any]:
    """A Ray task's view: veRL's compute_score and RewardHandle, through the handle only."""
    import asyncio

    from reward_server.ray_serve.handle import RewardHandle, compute_score

    async def run() -> dict[str, Any]:
        verl = await asyncio.gather(
            compute_score("openai/gsm8k", "The answer is \\boxed{42}.", "42"),
            compute_score("openai/gsm8k", "The answer is \\boxed{41}.", "42"),
            compute_score("codecontests", _echo("x")["response"],
                          {"inputs": ["7\n"], "outputs": ["7\n"]}))
        out = await RewardHandle(batch_size=4).rewards(items)
        return {"verl": verl, "rewards": out.rewards, "provenance": out.provenance,
                "node": ray.get_runtime_context().get_node_id()}

    return asyncio.run(run())


def test_handle_path_from_a_task_on_the_cluster(cluster: RayCluster, rewards_url: str):
    items, expected = _batch(10)
    task = ray.remote(_score_on_the_cluster).options(num_cpus=0, resources={"worker": 0.01})
    out = ray.get(task.remote(items), timeout=120)
    assert cluster.nodes[out["node"]] == "worker"
    assert [v["score"] for v in out["verl"]] == [1.0, 0.0, 1.0]
    assert out["rewards"] == expected
    assert set(out["provenance"]) == {"math", "code"}  # what produced them, through the handle


def test_autoscaling_up_under_load_and_back_down(cluster: RayCluster):
    # short delays for the test; the window stays above Serve's metrics interval (10 s)
    url = cluster.deploy("scaling", "/scaling", ray_min_replicas="1", ray_max_replicas="2",
                         ray_target_ongoing_requests="1", ray_upscale_delay_s="1",
                         ray_downscale_delay_s="2", ray_look_back_period_s="11")
    assert _running_replicas("scaling") == 1
    stop = threading.Event()
    wrong: list[Any] = []

    def load() -> None:
        items, expected = _batch(12, sleep_s=1.0)
        with RewardClient(url, batch_size=1, max_concurrency=6, max_attempts=None,
                          retry_for_s=60) as client:
            while not stop.is_set():
                out = client.rewards(items)
                if out.rewards != expected:
                    wrong.append(out.results)

    thread = threading.Thread(target=load)
    thread.start()
    try:
        _until(lambda: _running_replicas("scaling") == 2, 120, "no scale-up under load")
        seen: set[str] = set()  # the new replica is on the other node (one per node)
        _until(lambda: seen.update(_replicas(url, cluster.pids, calls=10)) or
               seen == set(cluster.nodes), 60, f"replicas answer only from {seen}")
    finally:
        stop.set()
        thread.join(120)
    assert not wrong, wrong[0]
    _until(lambda: _running_replicas("scaling") == 1, 120, "no scale-down once idle")
    serve.delete("scaling")


def test_node_without_an_engine_gives_unscorable_code_never_zero(cluster: RayCluster):
    node = cluster.cluster.add_node(num_cpus=1, object_store_memory=80 * MB,
                                    env_vars={**SERVE_ENV, "DOCKER_HOST": NO_ENGINE},
                                    resources={"no_engine": 1})
    try:
        url = cluster.deploy("no-engine", "/no-engine", ray_min_replicas="1",
                             ray_max_replicas="1", ray_resources='{"no_engine": 0.01}')
        where = _replicas(url, cluster.pids, calls=1)
        assert list(where) == [node.node_id]
        assert next(iter(where.values()))["docker_host"] == NO_ENGINE
        with RewardClient(url) as client:
            out = client.rewards([_echo("a"), _math(3, True), _math(3, False)])
        code = out.results[0]
        assert code["status"] == "sandbox_unavailable" and out.rewards[0] is None, code
        assert out.rewards[1:] == [1.0, 0.0]  # math on the same replica is scored
    finally:
        serve.delete("no-engine")
        cluster.cluster.remove_node(node)


def test_node_lost_mid_batch_loses_and_repeats_nothing(cluster: RayCluster, rewards_url: str):
    """The worker node itself goes (its raylet and every process on it killed, as when a
    machine is lost): the chunks in flight on its replica fail, the client sends them again,
    and the head's replica scores every item once, in its place. Last in the module: the
    node does not come back."""
    worker = next(n for n in cluster.cluster.worker_nodes
                  if cluster.nodes.get(n.node_id) == "worker")
    assert {r["node_id"] for r in _replicas(rewards_url, cluster.pids).values()} == set(
        cluster.nodes), "a replica on each node before the loss"
    out, expected, failures = _scored_through(
        rewards_url, lambda: cluster.cluster.remove_node(worker, allow_graceful=False),
        retry_for_s=180)
    assert failures, "the loss hit no request in flight"
    assert out.rewards == expected, out.results  # each item once, in its place
    after = _replicas(rewards_url, cluster.pids, calls=10)
    assert set(after) == {n for n, role in cluster.nodes.items() if role == "head"}, after
