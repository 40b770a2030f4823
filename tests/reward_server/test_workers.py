"""Several uvicorn worker processes: requests spread over them, metrics add up across them,
and every worker's pools stop with the server."""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx

from tests.conftest import run_server


def test_two_workers_share_the_load_and_the_metrics(tmp_path: Path) -> None:
    env = {"REWARD_SERVER_MATH_WORKERS": "1", "REWARD_SERVER_SANDBOX_POOL_SIZE": "1"}
    with run_server(tmp_path, env=env, args=["--workers", "2"], startup_s=120) as srv:
        pids = set()
        items = [{"verifier": "math", "response": f"\\boxed{{{i}}}", "answer": str(i)}
                 for i in range(5)]
        for _ in range(40):  # a new connection each time: the kernel spreads them
            pids.add(httpx.get(f"{srv.url}/healthz", timeout=10).json()["instance"])
            r = httpx.post(f"{srv.url}/v1/rewards", json={"items": items}, timeout=60)
            assert r.json()["rewards"] == [1.0] * 5
        assert len(pids) == 2, pids
        metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
        counted = sum(float(line.split()[1]) for line in metrics.splitlines()
                      if line.startswith('reward_requests_total{') and '"/v1/rewards"' in line)
        assert counted == 40  # both workers' counts, whichever worker answered /metrics


def test_workers_get_the_token_and_its_file_is_gone_after(tmp_path: Path) -> None:
    """The workers read one settings file the CLI wrote (not the environment); it holds the
    token in clear, so it goes when the server does."""
    files = lambda: set(Path(tempfile.gettempdir()).glob("reward-server-settings-*.json"))  # noqa: E731
    before = files()
    env = {"REWARD_SERVER_MATH_WORKERS": "1", "REWARD_SERVER_SANDBOX_POOL_SIZE": "1"}
    with run_server(tmp_path, env=env, args=["--workers", "2", "--api-token", "s3cret"],
                    startup_s=120) as srv:
        assert len(files() - before) == 1
        item = {"items": [{"verifier": "math", "response": "\\boxed{2}", "answer": "2"}]}
        for _ in range(20):  # new connections: both workers answer
            assert httpx.post(f"{srv.url}/v1/rewards", json=item, timeout=60).status_code == 401
            r = httpx.post(f"{srv.url}/v1/rewards", json=item, timeout=60,
                           headers={"Authorization": "Bearer s3cret"})
            assert r.status_code == 200 and r.json()["rewards"] == [1.0]
    assert files() - before == set()
