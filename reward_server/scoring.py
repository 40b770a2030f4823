"""Between the routes and the verifiers: request limits and mixed-batch dispatch."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from reward_server.errors import (
    InvalidItems,
    PayloadTooLarge,
    UnknownVerifier,
    format_validation_errors,
)
from reward_server.fair_queue import request_scope
from reward_server.settings import ServerSettings
from reward_server.verifiers.base import ItemBase, ResultBase, Verifier


def check_item_count(count: int, settings: ServerSettings) -> None:
    if count > settings.max_items_per_request:
        raise PayloadTooLarge(
            f"items: {count} items exceed the limit of {settings.max_items_per_request} per "
            "request (REWARD_SERVER_MAX_ITEMS_PER_REQUEST); split the batch"
        )


def check_field_sizes(items: Sequence[Any], settings: ServerSettings) -> None:
    limit = settings.max_field_bytes
    for index, item in enumerate(items):
        found = _oversized(item, f"items[{index}]", limit)
        if found is not None:
            path, size = found
            raise PayloadTooLarge(
                f"{path}: {size} bytes exceed the limit of {limit} bytes per field "
                "(REWARD_SERVER_MAX_FIELD_BYTES)"
            )


def _oversized(value: Any, path: str, limit: int) -> tuple[str, int] | None:
    """The first string over ``limit`` bytes and its path; a walk with a stack of its own
    (a raw item may nest as deep as the body parser allows, past the recursion limit here)."""
    stack = [(value, path)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            # a str of n characters holds at most 4n UTF-8 bytes: encode only when it may matter
            if len(value) * 4 > limit and (size := len(value.encode("utf-8", "replace"))) > limit:
                return path, size
            continue
        if isinstance(value, BaseModel):
            value = {name: getattr(value, name) for name in type(value).model_fields}
        if isinstance(value, Mapping):
            stack.extend((sub, f"{path}.{key}") for key, sub in reversed(list(value.items())))
        elif isinstance(value, list | tuple):
            stack.extend((sub, f"{path}[{k}]") for k, sub in reversed(list(enumerate(value))))
    return None


class Scorer:
    """Runs batches through the started verifiers."""

    def __init__(self, verifiers: Mapping[str, Verifier], settings: ServerSettings) -> None:
        self.verifiers = dict(verifiers)
        self.settings = settings

    def get(self, name: str) -> Verifier:
        try:
            return self.verifiers[name]
        except KeyError:
            known = ", ".join(sorted(self.verifiers)) or "none"
            raise UnknownVerifier(f"unknown verifier {name!r}; known verifiers: {known}") from None

    async def verify(self, name: str, items: Sequence[ItemBase],
                     caller: Hashable = None) -> list[ResultBase]:
        check_item_count(len(items), self.settings)
        check_field_sizes(items, self.settings)
        verifier = self.get(name)
        with request_scope(self.settings.request_budget_s, caller):  # one request to the pools
            return await verifier.verify(items)

    async def score_mixed(
        self, raw_items: Sequence[dict[str, Any]], caller: Hashable = None
    ) -> list[tuple[str, ResultBase]]:
        """Validate a mixed batch, run each verifier's share concurrently, keep item order."""
        check_item_count(len(raw_items), self.settings)
        check_field_sizes(raw_items, self.settings)
        groups: dict[str, list[tuple[int, ItemBase]]] = defaultdict(list)
        errors: list[str] = []
        for index, raw in enumerate(raw_items):
            name = raw.get("verifier")
            if not isinstance(name, str):
                errors.append(f"items[{index}].verifier: a verifier name (string) is required")
                continue
            verifier = self.get(name)
            fields = {k: v for k, v in raw.items() if k != "verifier"}
            try:
                groups[name].append((index, verifier.item_model.model_validate(fields)))
            except ValidationError as exc:
                errors.append(format_validation_errors(exc.errors(), ("items", index)))
        if errors:
            raise InvalidItems("; ".join(errors))

        async def run(name: str, batch: list[tuple[int, ItemBase]]) -> list[tuple[int, ResultBase]]:
            results = await self.verifiers[name].verify([item for _, item in batch])
            return [(index, result) for (index, _), result in zip(batch, results, strict=True)]

        out: list[tuple[str, ResultBase] | None] = [None] * len(raw_items)
        with request_scope(self.settings.request_budget_s, caller):  # one request to the pools
            shares = await asyncio.gather(*(run(n, b) for n, b in groups.items()))
        for name, scored in zip(groups, shares, strict=True):
            for index, result in scored:
                out[index] = (name, result)
        return out  # type: ignore[return-value]
