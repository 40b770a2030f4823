"""veRL's custom reward function, scored on the reward server.

    # veRL config (ppo_trainer.yaml)
    reward:
      custom_reward_function:
        path: /path/to/site-packages/reward_server/adapters/verl.py  (or a file importing it)
        name: compute_score
    # environment of the reward workers
    REWARD_SERVER_URL=http://reward-1:8000,http://reward-2:8000

``compute_score(data_source, solution_str, ground_truth, extra_info)`` is async, so veRL's
reward loop awaits it and many run at once; concurrent calls are gathered into batches of up
to ``REWARD_SERVER_BATCH`` items (or whatever arrived within ``REWARD_SERVER_BATCH_WAIT_MS``)
so the server sees batches, not single items. The verifier comes from ``extra_info
["verifier"]``, else from the data source (``DATA_SOURCES`` below), else math. For math the
ground truth is the answer; for code it is what veRL's own code scorers (``prime_code``,
``sandbox_fusion``) read: the row's ``input_output`` (``{"inputs", "outputs", "fn_name"?}``,
as a JSON string or a dict), or else a JSON list of {input, output}, or a dict of item fields
such as test_code and entry_point. Returns veRL's dict: ``score`` plus ``acc``, ``status``
and ``provenance`` (what produced it, as JSON text: veRL keeps it in its generation dumps and
averages only numbers) for its logs. An item the server could not score raises
``Unscorable``, and a row it cannot take raises ``InvalidItem`` naming the field (veRL
would otherwise train on a made-up number); either raises for that call only, never for
the calls batched with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import weakref
from typing import Any

from reward_server.adapters.items import label_fields
from reward_server.client import AsyncRewardClient, RewardClient, RewardRequestError, split_urls
from reward_server.statuses import INVALID_ITEM

DATA_SOURCES = {  # data_source prefixes (veRL's dataset names) -> verifier
    "openai/gsm8k": "math", "lighteval/MATH": "math", "DigitalLearningGmbH/MATH": "math",
    "math": "math", "codecontests": "code", "apps": "code", "taco": "code",
    "codeforces": "code", "livecodebench": "code", "humaneval": "code", "mbpp": "code",
    "code": "code", "primeintellect": "code", "deepmind/code_contests": "code",
    "codeparrot/apps": "code", "baai/taco": "code", "open-r1/codeforces": "code",
}


class Unscorable(RuntimeError):
    """The server could not score the item (e.g. the sandbox is unavailable)."""


class InvalidItem(ValueError):
    """The server cannot take the row as an item (a missing field, a test in a shape the
    verifier does not accept); the message names the field."""


def verifier_for(data_source: str, extra_info: dict[str, Any] | None) -> str:
    if extra_info and extra_info.get("verifier"):
        return str(extra_info["verifier"])
    for prefix, verifier in DATA_SOURCES.items():
        if data_source.lower().startswith(prefix.lower()):
            return verifier
    return "math"


def to_item(data_source: str, solution_str: str, ground_truth: Any,
            extra_info: dict[str, Any] | None) -> dict[str, Any]:
    verifier = verifier_for(data_source, extra_info)
    item = {"verifier": verifier, "response": solution_str, **label_fields(ground_truth)}
    item.update((extra_info or {}).get("reward_params") or {})
    question = (extra_info or {}).get("question")  # veRL's preprocessing scripts store it
    if verifier == "math" and isinstance(question, str) and "question" not in item:
        item["question"] = question  # a copied question's expression scores 0
    return item


def _unplaced(detail: str) -> str:
    """A server detail without ``items[k]``: an item's place in our batch means nothing to
    the veRL call that made it."""
    return _PLACE.sub("", detail)


_PLACE = re.compile(r"items\[\d+\](?:\.|: )?")


class Batcher:
    """Gathers concurrent single-item calls into batched requests, one batcher per loop."""

    def __init__(self, client: AsyncRewardClient, max_items: int, wait_s: float) -> None:
        self.client, self.max_items, self.wait_s = client, max_items, wait_s
        self._pending: list[tuple[dict[str, Any], asyncio.Future[dict[str, Any]]]] = []
        self._flush: asyncio.TimerHandle | None = None

    def submit(self, item: dict[str, Any]) -> asyncio.Future[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        self._pending.append((item, future))
        if len(self._pending) >= self.max_items:
            self._send()
        elif self._flush is None:
            self._flush = loop.call_later(self.wait_s, self._send)
        return future

    def _send(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        batch, self._pending = self._pending, []
        if batch:
            asyncio.ensure_future(self._score(batch))

    async def _score(self, batch: list[tuple[dict[str, Any], asyncio.Future]]) -> None:
        try:
            out = await self.client.rewards([item for item, _ in batch])
        except RewardRequestError as exc:
            if len(batch) > 1:  # one call's item refused the request: find it by halves
                half = len(batch) // 2
                await asyncio.gather(self._score(batch[:half]), self._score(batch[half:]))
                return
            self._fail(batch, InvalidItem(_unplaced(exc.detail)))
            return
        except Exception as exc:  # the server is down: every caller in the batch sees it
            self._fail(batch, exc)
            return
        for index, ((_, future), reward) in enumerate(zip(batch, out.rewards, strict=True)):
            if not future.done():
                future.set_result({**out.results[index], "reward": reward,
                                   "provenance": out.provenance_of(index)})


    @staticmethod
    def _fail(batch: list[tuple[dict[str, Any], asyncio.Future]], exc: Exception) -> None:
        for _, future in batch:
            if not future.done():
                future.set_exception(exc)


_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Batcher] = (
    weakref.WeakKeyDictionary())
_sync_client: RewardClient | None = None


def _client_options() -> dict[str, Any]:
    return {"base_url": split_urls(os.environ.get("REWARD_SERVER_URL", "http://127.0.0.1:8000")),
            "token": os.environ.get("REWARD_SERVER_TOKEN"), "max_attempts": None,
            "retry_for_s": float(os.environ.get("REWARD_SERVER_RETRY_S", "300"))}


def _batcher() -> Batcher:
    loop = asyncio.get_running_loop()
    if loop not in _batchers:
        _batchers[loop] = Batcher(
            AsyncRewardClient(**_client_options()),
            int(os.environ.get("REWARD_SERVER_BATCH", "256")),
            float(os.environ.get("REWARD_SERVER_BATCH_WAIT_MS", "5")) / 1000)
    return _batchers[loop]


def _as_verl(result: dict[str, Any]) -> dict[str, Any]:
    if result.get("status") == INVALID_ITEM:
        raise InvalidItem(_unplaced(str(result.get("detail"))))
    if result["reward"] is None:
        raise Unscorable(f"{result.get('status')}: {result.get('detail')}")
    reward = float(result["reward"])
    # veRL keeps every key per sample (its generation dumps) and averages numbers only
    return {"score": reward, "acc": bool(result.get("correct", reward >= 1.0)),
            "status": result.get("status", ""),
            "provenance": json.dumps(result.get("provenance"), sort_keys=True)}


async def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                        extra_info: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
    return _as_verl(await _batcher().submit(
        to_item(data_source, solution_str, ground_truth, extra_info)))


def compute_score_sync(data_source: str, solution_str: str, ground_truth: Any,
                       extra_info: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
    """For veRL's older, synchronous reward managers (one request per item)."""
    global _sync_client
    if _sync_client is None:
        _sync_client = RewardClient(**_client_options())
    out = _sync_client.rewards([to_item(data_source, solution_str, ground_truth, extra_info)])
    return _as_verl({**out.results[0], "reward": out.rewards[0],
                     "provenance": out.provenance_of(0)})
