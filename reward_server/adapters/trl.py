"""A TRL reward function that scores on the reward server.

    from reward_server.adapters.trl import ServerReward
    trainer = GRPOTrainer(model=..., train_dataset=ds, args=GRPOConfig(...),
                          reward_funcs=[ServerReward("http://reward:8000", verifier="math")])

TRL calls it with the prompts, the completions and every other dataset column as keyword
lists. It is an async callable, so TRL runs it on its event loop alongside other async
rewards; all of a step's completions go out as one batch (split and spread over several
server URLs by the client). Columns named like the verifier's item fields (``answer``,
``tests``, ...) are passed through; ``columns`` maps other names. The prompt goes along as
the item's ``question`` where the verifier has that field (math: a copied question scores
0). APPS's ``input_output`` column (TACO, PrimeIntellect) becomes the item's tests as APPS's
grader reads it. An item the server could not score (sandbox unavailable), or a row it cannot
take (a missing field: a warning names it), comes back as None, which TRL turns into NaN
and leaves out, so one bad row costs no other completion its reward; a server that stays
down raises, stopping training instead of training on made-up rewards.

Each completion's item (less its response: the completion is beside it), status and
provenance go to TRL's completions table (``log_extra``; ``GRPOConfig(log_completions=True)``
writes it to ``<output_dir>/completions/*.parquet``) as ``<name>/item``, ``<name>/status`` and
``<name>/provenance``, JSON text, so that a stored run can be scored again by a newer server
(``reward-rescore``); ``log_items=False`` leaves them out.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reward_server.adapters.items import build_item, completion_text, item_fields
from reward_server.admission import INVALID_ITEM
from reward_server.client import AsyncRewardClient, Rewards


class ServerReward:
    def __init__(self, url: str | Sequence[str], verifier: str = "math", *,
                 columns: Mapping[str, str] | None = None,
                 params: Mapping[str, Any] | None = None, name: str | None = None,
                 token: str | None = None, log_items: bool = True,
                 **client_options: Any) -> None:
        self.urls, self.verifier = url, verifier
        self.log_items = log_items
        self.columns = dict(columns or {})
        self.params = dict(params or {})
        self.__name__ = name or f"{verifier}_reward"  # TRL logs rewards/<__name__>/mean
        self._client_options = {"token": token, **client_options}
        self._client: AsyncRewardClient | None = None
        self._fields: set[str] | None = None

    async def _ready(self) -> AsyncRewardClient:
        # made on first call, on the loop TRL runs async rewards on (httpx binds to it)
        if self._client is None:
            self._client = AsyncRewardClient(self.urls, **self._client_options)
            self._fields = item_fields(await self._client.verifiers(), self.verifier)
        return self._client

    async def __call__(self, prompts: list[Any], completions: list[Any],
                       completion_ids: list[Any] | None = None, *,
                       log_metric: Callable[[str, float], None] | None = None,
                       log_extra: Callable[[str, list[Any]], None] | None = None,
                       **columns: Any) -> list[float | None]:
        client = await self._ready()
        assert self._fields is not None
        data = {k: v for k, v in columns.items()
                if isinstance(v, list) and len(v) == len(completions)}
        if "question" in self._fields and "question" not in data and \
                "question" not in self.columns.values() and len(prompts) == len(completions):
            # the math verifier refuses an answer that copies its question's expression
            data["question"] = [completion_text(p) for p in prompts]
        items: dict[int, dict[str, Any]] = {}
        problems: list[str] = []
        for i, c in enumerate(completions):
            try:
                items[i] = build_item(self.verifier, completion_text(c),
                                      {k: v[i] for k, v in data.items()}, self._fields,
                                      self.columns, self.params)
            except ValueError as exc:  # a column in a shape the item cannot take
                problems.append(f"row {i}: {exc}")
        out = await client.rewards(list(items.values()))
        rewards: list[float | None] = [None] * len(completions)
        shaped = _shaped_by_outages(columns.get("environments"), len(completions))
        for i, reward, result in zip(items, out.rewards, out.results, strict=True):
            # a rollout that went on from a tool outage's error text is not the policy's
            # answer: no reward either way (trl_tools.SandboxSession counts its outages)
            rewards[i] = None if shaped[i] else reward
            if result.get("status") == INVALID_ITEM:
                problems.append(f"row {i}: {result.get('detail')}")
        if problems:
            warnings.warn(f"{self.__name__}: {len(problems)} of {len(completions)} rows "
                          f"could not be scored: {problems[0]}", stacklevel=2)
        if log_metric is not None and rewards:
            unscorable = sum(r is None for r in rewards) / len(rewards)
            log_metric(f"{self.__name__}/unscorable_rate", unscorable)
        if log_extra is not None and self.log_items:
            self._log_items(log_extra, len(completions), items, out)
        return rewards

    def _log_items(self, log_extra: Callable[[str, list[Any]], None], n: int,
                   items: dict[int, dict[str, Any]], out: Rewards) -> None:
        """One value per completion in each column, None for a row that made no item."""
        columns: dict[str, list[Any]] = {key: [None] * n for key in (
            "item", "status", "provenance")}
        for k, i in enumerate(items):
            columns["item"][i] = _json({f: v for f, v in items[i].items() if f != "response"})
            columns["status"][i] = out.results[k].get("status")
            columns["provenance"][i] = _json(out.provenance_of(k))
        for key, values in columns.items():
            log_extra(f"{self.__name__}/{key}", values)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _shaped_by_outages(environments: Any, n: int) -> list[bool]:
    """Per completion, whether its environment (TRL passes ``environments``) saw a tool call
    the sandbox could not answer for a reason the policy did not cause."""
    if not isinstance(environments, list) or len(environments) != n:
        return [False] * n
    return [int(getattr(env, "outages", 0) or 0) > 0 for env in environments]
