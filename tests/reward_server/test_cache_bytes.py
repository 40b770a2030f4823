"""What one caller sends does not stay in the server's memory: the result cache and the
memories of timeouts keep a digest of each item, not its texts. A math reference may be a
worked solution of megabytes (it is read by math-verify's extraction), and the cache held
each in full: 64 distinct items with a 2 MB reference grew the server by ~2.6 MB each, for
good (an audit: 167 → 789 MB after 240), so one caller could fill the host's memory long
before the cache's 100,000 entries. Through the real server, its memory read from /proc."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psutil
import pytest

from reward_server.testing import ServerProcess, run_server

ITEMS, PER_REQUEST, REFERENCE_BYTES = 32, 16, 2_000_000


# glibc's malloc raises its mmap threshold to the largest block freed so far, so after the
# first 2 MB string every later one comes from the heap, whose freed middle it keeps: that
# retention, not any object, grew the server 60 MB over 32 items on one CI run (2 MB on
# another). A fixed threshold maps each large block and unmaps it when freed, so what stays
# in the RSS is what something still holds: the copies this test is about.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "131072"}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("cache-bytes"), env=ALLOCATOR) as server:
        yield server


def rss_mb(srv: ServerProcess) -> float:
    return psutil.Process(srv.proc.pid).memory_info().rss / 2**20


def test_distinct_megabyte_references_leave_no_copy_behind(srv: ServerProcess) -> None:
    def item(k: int) -> dict:
        return {"response": "\\boxed{\\frac{2}{4}}",
                "answer": f"[{k}] " + "so " * (REFERENCE_BYTES // 3) + "The answer is $\\frac12$"}

    with httpx.Client(base_url=srv.url, timeout=300) as c:
        def post(start: int) -> list[dict]:
            r = c.post("/v1/verify/math", json={"items": [item(k) for k in range(
                start, start + PER_REQUEST)]})
            assert r.status_code == 200, r.text[:500]
            return r.json()["results"]

        for warm in range(2):  # the steady state: pools, parsers, the allocator's buffers
            post(10_000 + warm * PER_REQUEST)
        before = rss_mb(srv)
        for start in range(0, ITEMS, PER_REQUEST):
            results = post(start)
            assert {r["status"] for r in results} <= {"ok", "timeout"}, results[0]
        grown = rss_mb(srv) - before
    # 32 references of 2 MB are 64 MB: a cache key holding the texts again grew it 68 MB
    # here; the digests, 0
    assert grown < 32, f"the server grew {grown:.0f} MB over {ITEMS} items"


def test_a_reasoning_gym_answer_is_kept_as_a_digest() -> None:
    """The reasoning_gym verifier's cache key: its caller and a digest, whatever the size of
    the answer and the entry; distinct parts never make one key."""
    import pickle

    from reward_server.verifiers.reasoning_gym.verifier import stored_key

    big = "x" * REFERENCE_BYTES
    key = stored_key(("caller", "basic_arithmetic", big, pickle.dumps({"q": big}), "null"))
    assert len(pickle.dumps(key)) < 200
    assert key[0] == "caller"
    assert stored_key(("c", "t", "ab", b"c", "d")) != stored_key(("c", "t", "a", b"bc", "d"))
