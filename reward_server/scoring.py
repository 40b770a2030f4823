"""Between the routes and the verifiers: each item admitted or refused on its own
(admission.py), then a mixed batch dispatched to its verifiers, in item order."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from reward_server.admission import (
    OnInvalid,
    Refused,
    admit,
    admit_all,
    admitted_off_the_loop,
    check_field_sizes,
    check_item_count,
    may_hold_oversized,
    raise_refusals,
    refused,
)
from reward_server.errors import UnknownVerifier
from reward_server.fair_queue import RequestScope, request_scope
from reward_server.pipeline import Pipeline
from reward_server.quotas import Quotas
from reward_server.settings import ServerSettings
from reward_server.statuses import INVALID_ITEM
from reward_server.verifiers.base import ItemBase, ResultBase, Verifier

T = TypeVar("T")


class Scorer:
    """Runs batches through the started verifiers, each by its ``pipeline.Pipeline``."""

    def __init__(self, verifiers: Mapping[str, Verifier], settings: ServerSettings) -> None:
        self.verifiers = dict(verifiers)
        self.pipelines = {name: Pipeline(v) for name, v in self.verifiers.items()}
        self.settings = settings
        self.quotas = Quotas(settings.max_requests_per_caller, settings.max_items_per_caller,
                             settings.max_items_in_flight, settings.max_body_bytes_per_caller,
                             settings.max_body_bytes_in_flight)

    async def start(self) -> None:
        for pipeline in self.pipelines.values():
            await pipeline.start()

    async def stop(self) -> None:
        await asyncio.gather(*(p.stop() for p in self.pipelines.values()),
                             return_exceptions=True)

    @contextmanager
    def request(self, caller: Hashable, items: int) -> Iterator[RequestScope]:
        """One request of ``items`` items: room for them under the caller's and the
        server's caps (else a 429 at once: ``quotas``; the request itself counts from the
        turnstile), then one request to the fair gates, with the request budget. Every
        route that runs work opens one."""
        with self.quotas.hold_items(caller, items), \
                request_scope(self.settings.request_budget_s, caller, items) as scope:
            yield scope

    def get(self, name: str) -> Verifier:
        try:
            return self.verifiers[name]
        except KeyError:
            known = ", ".join(sorted(self.verifiers)) or "none"
            raise UnknownVerifier(f"unknown verifier {name!r}; known verifiers: {known}") from None

    async def verify(self, name: str, raw_items: Sequence[Any], caller: Hashable = None,
                     on_invalid: OnInvalid = "null", body_bytes: int | None = None
                     ) -> list[ResultBase]:
        """One verifier's batch; an item that fails its checks gets a ``Refused`` result.
        ``body_bytes``: the request body's size, when known (admission.may_hold_oversized)."""
        check_item_count(len(raw_items), self.settings)
        verifier = self.get(name)
        with self.request(caller, len(raw_items)):  # before its items cost anything
            admitted = await off_the_loop_if(
                admitted_off_the_loop(body_bytes, self.settings), admit_all,
                verifier.item_model, raw_items, self.settings, name, on_invalid, body_bytes,
                type(verifier).checks())
            items = [a for a in admitted if not isinstance(a, Refused)]
            started = time.perf_counter()
            results = iter(await self.pipelines[name].verify(items, started) if items else [])
        return [a if isinstance(a, Refused) else next(results) for a in admitted]

    async def score_mixed(self, raw_items: Sequence[Any], caller: Hashable = None,
                          on_invalid: OnInvalid = "null", body_bytes: int | None = None
                          ) -> list[tuple[str | None, ResultBase]]:
        """Admit a mixed batch item by item, run each verifier's share concurrently, keep
        item order; a refused item is ``(its verifier's name or None, Refused)``."""
        check_item_count(len(raw_items), self.settings)
        walk = may_hold_oversized(body_bytes, self.settings)

        async def run(name: str, batch: list[tuple[int, ItemBase]]) -> list[tuple[int, ResultBase]]:
            results = await self.pipelines[name].verify([item for _, item in batch], started)
            return [(index, result) for (index, _), result in zip(batch, results, strict=True)]

        with self.request(caller, len(raw_items)):  # one request, before its items cost
            out, groups = await off_the_loop_if(
                admitted_off_the_loop(body_bytes, self.settings), self._admit_batch,
                raw_items, on_invalid, walk)
            started = time.perf_counter()
            shares = await asyncio.gather(*(run(n, b) for n, b in groups.items()))
        for name, scored in zip(groups, shares, strict=True):
            for index, result in scored:
                out[index] = (name, result)
        return out  # type: ignore[return-value]

    def _admit_batch(self, raw_items: Sequence[Any], on_invalid: OnInvalid, walk: bool
                     ) -> tuple[list[tuple[str | None, ResultBase] | None],
                                dict[str, list[tuple[int, ItemBase]]]]:
        if on_invalid == "error" and walk:
            check_field_sizes(raw_items, self.settings)  # every field walked once, here
            walk = False
        groups: dict[str, list[tuple[int, ItemBase]]] = defaultdict(list)
        out: list[tuple[str | None, ResultBase] | None] = [None] * len(raw_items)
        for index, raw in enumerate(raw_items):
            name, admitted = self._admit_mixed(raw, index, on_invalid, walk)
            if isinstance(admitted, Refused):
                out[index] = (name, admitted)
            else:
                groups[name].append((index, admitted))  # type: ignore[index]
        if on_invalid == "error":
            raise_refusals([result for _, result in filter(None, out)])
        return out, groups

    def _admit_mixed(self, raw: Any, index: int, on_invalid: OnInvalid, walk: bool
                     ) -> tuple[str | None, ItemBase | Refused]:
        name = raw.get("verifier") if isinstance(raw, dict) else None
        if not isinstance(name, str):
            return None, refused(INVALID_ITEM, f"items[{index}].verifier: a verifier name "
                                 "(string) is required", None)
        if name not in self.verifiers:
            if on_invalid == "error":
                self.get(name)  # the 404 that names the verifiers there are
            known = ", ".join(sorted(self.verifiers))
            return name, refused(INVALID_ITEM, f"items[{index}].verifier: unknown verifier "
                                 f"{name!r}; known verifiers: {known}", None)
        fields = {k: v for k, v in raw.items() if k != "verifier"}
        verifier = self.verifiers[name]
        return name, admit(verifier.item_model, fields, index, self.settings, name, walk,
                           type(verifier).checks())


async def off_the_loop_if(large: bool, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``; on a thread when ``large``: for a body or a message that may hold more
    values than the loop validates in a few milliseconds (``admitted_off_the_loop``), whose
    walk and validation cost what its values number, the event loop answers other callers
    meanwhile (the thread yields the GIL every 5 ms)."""
    if not large:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)
