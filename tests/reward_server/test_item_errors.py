"""One bad item never costs the others: each item of a batch is admitted on its own, and one
that fails its checks gets a result that names the field; ``on_invalid=error`` keeps the
whole-request 4xx for a caller that wants it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from reward_server.client import RewardClient, RewardRequestError
from tests.conftest import KNOWN_VERIFIERS, ServerProcess, run_server

LIMIT = 400  # bytes per field on the limited server


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_server(tmp_path_factory.mktemp("items"),
                    env={"REWARD_SERVER_MAX_FIELD_BYTES": str(LIMIT)}) as srv:
        yield srv


GOOD = [{"response": "so \\boxed{12}", "answer": "12"},
        {"response": "the answer is 5", "answer": "7"}]
BAD = {  # an item -> the detail its result must carry (its index is 1 in the batch)
    "missing answer": ({"response": "x"}, "items[1].answer: Field required"),
    "unknown field": ({"response": "x", "answer": "1", "bogus": 1},
                      "items[1].bogus: Extra inputs are not permitted"),
    "bad value": ({"response": "x", "answer": "1", "tolerance": -1}, "items[1].tolerance"),
    "not an object": (5, "items[1]: an item is a JSON object, not int"),
    "oversized answer": ({"response": "x", "answer": "9" * (LIMIT + 1)},
                         f"items[1].answer: {LIMIT + 1} bytes exceed the limit of {LIMIT}"),
}


def _metric(url: str, verifier: str, status: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    key = f'reward_items_total{{status="{status}",verifier="{verifier}"}}'
    return sum(float(line.split()[1]) for line in text.splitlines() if line.startswith(key))


@pytest.mark.parametrize("case", list(BAD))
def test_verify_answers_every_valid_item_and_names_the_bad_one(limited: ServerProcess,
                                                               case: str) -> None:
    bad, detail = BAD[case]
    alone = httpx.post(limited.url + "/v1/verify/math", json={"items": GOOD}, timeout=60).json()["results"]
    before = _metric(limited.url, "math", "invalid_item")
    r = httpx.post(limited.url + "/v1/verify/math", json={"items": [GOOD[0], bad, GOOD[1]]}, timeout=60)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [results[0], results[2]] == alone  # exactly what the valid items get alone
    assert results[1]["score"] is None and results[1]["status"] == "invalid_item"
    assert results[1]["detail"].startswith(detail), results[1]
    assert _metric(limited.url, "math", "invalid_item") == before + 1


def test_rewards_gives_each_bad_item_its_own_result(limited: ServerProcess) -> None:
    items: list[Any] = [
        {"verifier": "math", **GOOD[0]},
        {"verifier": "chess", "response": "e4"},
        {"response": "x", "answer": "1"},
        {"verifier": "code", "response": "print(1)"},  # no tests
        {"verifier": "math", **GOOD[1]},
        [1, 2],
    ]
    before = _metric(limited.url, "none", "invalid_item")
    r = httpx.post(limited.url + "/v1/rewards", json={"items": items}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["rewards"] == [1.0, None, None, None, 0.0, None]
    statuses = [res["status"] for res in body["results"]]
    assert statuses[1:4] == ["invalid_item"] * 3 and statuses[5] == "invalid_item"
    assert [res["verifier"] for res in body["results"]] == [
        "math", "chess", None, "code", "math", None]
    details = [res.get("detail") or "" for res in body["results"]]
    assert details[1] == f"items[1].verifier: unknown verifier 'chess'; {KNOWN_VERIFIERS}"
    assert details[2] == "items[2].verifier: a verifier name (string) is required"
    assert details[3].startswith("items[3]: Value error, give one of 'tests'")
    # a name the server does not know never becomes a metrics label
    assert _metric(limited.url, "none", "invalid_item") == before + 3
    assert _metric(limited.url, "chess", "invalid_item") == 0


@pytest.mark.parametrize("path", ["/v1/verify/math", "/v1/rewards"])
def test_a_response_over_the_limit_scores_0_not_null(limited: ServerProcess, path: str
                                                     ) -> None:
    """The completion made itself too long: that is its verdict, not an unscorable row."""
    long = {"response": "\\boxed{12}" + " " * LIMIT, "answer": "12"}
    items = [GOOD[0], long]
    if path == "/v1/rewards":
        items = [{"verifier": "math", **i} for i in items]
    results = httpx.post(limited.url + path, json={"items": items}, timeout=60).json()["results"]
    assert results[0]["score"] == 1.0
    assert results[1]["score"] == 0.0 and results[1]["status"] == "response_too_long"
    assert results[1]["detail"].startswith(f"items[1].response: {LIMIT + 10} bytes exceed")


def test_on_invalid_error_refuses_the_whole_request(limited: ServerProcess) -> None:
    url = limited.url
    r = httpx.post(url + "/v1/verify/math?on_invalid=error",
                   json={"items": [GOOD[0], {"response": "x"}, {"response": "y"}]}, timeout=60)
    assert r.status_code == 422
    assert r.json()["detail"] == ("items[1].answer: Field required; "
                                  "items[2].answer: Field required")
    r = httpx.post(url + "/v1/rewards?on_invalid=error",
                   json={"items": [{"verifier": "math", **GOOD[0]}, {"verifier": "chess"}]}, timeout=60)
    assert r.status_code == 404 and KNOWN_VERIFIERS in r.text
    long = {"verifier": "math", "response": "x" * (LIMIT + 1), "answer": "1"}
    r = httpx.post(url + "/v1/rewards?on_invalid=error", json={"items": [long]}, timeout=60)
    assert r.status_code == 413 and r.json()["detail"].startswith("items[0].response:")
    r = httpx.post(url + "/v1/rewards?on_invalid=maybe", json={"items": []}, timeout=60)
    assert r.status_code == 422 and "on_invalid" in r.json()["detail"]


def test_the_client_sees_each_bad_item_or_raises_when_asked(limited: ServerProcess) -> None:
    items = [{"verifier": "math", **GOOD[0]}, {"verifier": "math", "response": "x"},
             {"verifier": "math", **GOOD[1]}]
    # batch_size 1: the bad item is a chunk of its own; the others' chunks are not lost
    for batch_size in (512, 1):
        with RewardClient(limited.url, batch_size=batch_size) as client:
            out = client.rewards(items)
            assert out.rewards == [1.0, None, 0.0]
            assert out.results[1]["status"] == "invalid_item"
            # in the caller's positions, whichever chunk the item went in
            assert out.results[1]["detail"] == "items[1].answer: Field required"
            assert client.verify("math", [GOOD[0], {"response": "x"}])[1]["detail"] == \
                "items[1].answer: Field required"
    with RewardClient(limited.url, on_invalid="error") as client:
        with pytest.raises(RewardRequestError, match=r"items\[1\].answer: Field required"):
            client.rewards(items)
    with pytest.raises(ValueError, match="on_invalid"):
        RewardClient(limited.url, on_invalid="skip")


def test_the_api_page_still_shows_each_verifiers_item_schema(limited: ServerProcess) -> None:
    spec = httpx.get(limited.url + "/openapi.json", timeout=60).json()

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            target: Any = spec
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    for name, field in (("math", "answer"), ("code", "tests")):
        body = spec["paths"][f"/v1/verify/{name}"]["post"]["requestBody"]
        schema = body["content"]["application/json"]["schema"]
        item = resolve(schema["properties"]["items"]["items"])
        assert field in item["properties"] and "response" in item["properties"]
        assert set(item["required"]) >= {"response"}
    code = resolve(schema["properties"]["items"]["items"])
    test = resolve(code["properties"]["tests"]["anyOf"][0]["items"])
    assert "input" in test["properties"]  # a nested model's reference resolves too
    params = spec["paths"]["/v1/rewards"]["post"]["parameters"]
    assert [p["name"] for p in params] == ["on_invalid"]
