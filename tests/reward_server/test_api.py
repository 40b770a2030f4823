"""The HTTP API v1 through the real server: shapes, mixed batches, metrics, cache, docs."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import BUILT_IN_VERIFIERS, ServerProcess


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if m and all(part in m.group(1).split(",") for part in want.split(",") if part):
            total += float(m.group(2))
    return total


def test_healthz(http: httpx.Client) -> None:
    r = http.get("/healthz")
    assert r.status_code == 200
    body = r.json()
    assert {k: body[k] for k in ("status", "verifiers")} == {"status": "ok",
                                                             "verifiers": BUILT_IN_VERIFIERS}
    host, pid = body["instance"].rsplit(":", 1)
    assert host and pid.isdigit()


def test_verify_math_shape_and_order(http: httpx.Client) -> None:
    items = [
        {"response": "\\boxed{2}", "answer": "2"},
        {"response": "nothing here", "answer": "2"},
        {"response": "\\boxed{3}", "answer": "2"},
    ]
    r = http.post("/v1/verify/math", json={"items": items})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["ok", "no_answer", "ok"]
    assert [x["correct"] for x in results] == [True, False, False]
    assert set(results[0]) == {"score", "correct", "status", "extracted", "detail"}
    assert results[0]["extracted"] == "2" and results[1]["extracted"] is None


def test_rewards_mixed_batch(http: httpx.Client) -> None:
    items = [
        {"verifier": "math", "response": "#### 5", "answer": "5"},
        {"verifier": "math", "response": "#### 6", "answer": "5"},
        {"verifier": "math", "response": "I think 5", "answer": "5", "extract": "last_number"},
    ]
    r = http.post("/v1/rewards", json={"items": items})
    assert r.status_code == 200
    body = r.json()
    assert body["rewards"] == [1.0, 0.0, 1.0]
    assert [x["verifier"] for x in body["results"]] == ["math"] * 3
    assert body["results"][1]["status"] == "ok"


def test_empty_batch(http: httpx.Client) -> None:
    assert http.post("/v1/rewards", json={"items": []}).json() == {"rewards": [], "results": [],
                                                                   "provenance": {}}
    assert http.post("/v1/verify/math", json={"items": []}).json()["results"] == []


def test_verifiers_list_schemas(http: httpx.Client) -> None:
    body = http.get("/v1/verifiers").json()
    math = next(v for v in body["verifiers"] if v["name"] == "math")
    assert math["endpoint"] == "/v1/verify/math"
    assert {"response", "answer"} <= set(math["item_schema"]["properties"])
    assert set(math["item_schema"]["required"]) == {"response", "answer"}
    assert "correct" in math["result_schema"]["properties"]


def test_openapi_and_docs(http: httpx.Client) -> None:
    spec = http.get("/openapi.json").json()
    assert {"/v1/verify/math", "/v1/rewards", "/v1/verifiers", "/healthz"} <= set(spec["paths"])
    assert http.get("/docs").status_code == 200


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_every_asset_from_the_server_itself(http: httpx.Client, page: str
                                                            ) -> None:
    """An offline cluster reaches no CDN: each script, stylesheet and icon the page names is
    served by the reward server, and is the real thing (not an empty page)."""
    html = http.get(page).text
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
    assert any(a.endswith(".js") for a in assets), html
    for asset in assets:
        assert not re.match(r"(?:https?:)?//", asset), f"{page} loads {asset} from outside"
        r = http.get(asset)
        assert r.status_code == 200 and len(r.content) > 1000, (asset, r.status_code)
    assert "/openapi.json" in html


def test_cache_coalesces_a_group(http: httpx.Client) -> None:
    before = http.get("/metrics").text
    # a group of 16 completions with 2 distinct final answers, never seen before (neither
    # plain numbers nor the reference's own text: those take the fast path, no cache)
    items = [{"response": f"Reasoning {i}... \\boxed{{\\sqrt{{{7919 if i % 4 else 7907}}}}}",
              "answer": "7919^{1/2}"} for i in range(16)]
    results = http.post("/v1/verify/math", json={"items": items}).json()["results"]
    assert sum(x["correct"] for x in results) == 12
    after = http.get("/metrics").text
    misses = _metric(after, "reward_cache_misses_total", verifier="math") - _metric(
        before, "reward_cache_misses_total", verifier="math")
    hits = _metric(after, "reward_cache_hits_total", verifier="math") - _metric(
        before, "reward_cache_hits_total", verifier="math")
    assert (misses, hits) == (2, 14)


def test_metrics_exposition(http: httpx.Client) -> None:
    http.post("/v1/verify/math", json={"items": [{"response": "\\boxed{1}", "answer": "1"}]})
    text = http.get("/metrics").text
    assert _metric(text, "reward_items_total", verifier="math", status="ok") >= 1
    assert _metric(text, "reward_requests_total", route="/v1/verify/math", code="200") >= 1
    assert "reward_request_seconds_bucket" in text
    assert "reward_item_seconds_bucket" in text
    assert "reward_timeouts_total" in text


def test_server_process_answers_concurrent_clients(server: ServerProcess) -> None:
    import concurrent.futures

    def one(i: int) -> float:
        with server.client() as c:
            items = [{"response": f"\\boxed{{{i}}}", "answer": str(i)}]
            return c.post("/v1/verify/math", json={"items": items}).json()["results"][0]["score"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(32))) == [1.0] * 32
