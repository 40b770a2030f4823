"""Which items of a batch go on to their verifier: the request limits, and each item's size
and schema checked on its own.

A trainer batches a step's completions from many dataset rows; one malformed row (a missing
field, a test in a shape the verifier does not take) must not cost it every other reward of
the step. So by default an item that fails its checks gets a result of its own: status
``invalid_item``, score null (the row is at fault, not the completion), and a detail that
names the field as a 422 would. A response over the size limit is the completion's own doing,
so it scores 0 (``response_too_long``), never null. A caller that prefers the whole request
refused asks for ``on_invalid=error``: the first oversized field is a 413 and every schema
error one 422, as the limits below say.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from fastapi import Query
from pydantic import BaseModel, Field, ValidationError

from reward_server import metrics
from reward_server.errors import InvalidItems, PayloadTooLarge, format_validation_errors
from reward_server.settings import ServerSettings
from reward_server.statuses import INVALID_ITEM, RESPONSE_TOO_LONG
from reward_server.verifiers.base import ItemBase, ResultBase

log = logging.getLogger("reward_server.admission")

OnInvalid = Literal["null", "error"]
OnInvalidQuery = Annotated[OnInvalid, Query(
    description="An item that fails its checks: a result of its own ('null': status "
    "invalid_item, score null; a response over the size limit scores 0), or 'error': the "
    "whole request is a 413/422.")]


class Refused(ResultBase):
    """The result of an item that was not scored by its verifier."""

    score: float | None = Field(description="null for invalid_item; 0 for response_too_long.")
    status: Literal["invalid_item", "response_too_long"]
    detail: str = Field(description="What is wrong, naming the field (items[3].answer: ...).")


def check_item_count(count: int, settings: ServerSettings) -> None:
    if count > settings.max_items_per_request:
        raise PayloadTooLarge(
            f"items: {count} items exceed the limit of {settings.max_items_per_request} per "
            "request (REWARD_SERVER_MAX_ITEMS_PER_REQUEST); split the batch"
        )


def too_large_message(path: str, size: int, limit: int) -> str:
    return (f"{path}: {size} bytes exceed the limit of {limit} bytes per field "
            "(REWARD_SERVER_MAX_FIELD_BYTES)")


def check_field_sizes(items: Sequence[Any], settings: ServerSettings) -> None:
    limit = settings.max_field_bytes
    for index, item in enumerate(items):
        found = oversized(item, f"items[{index}]", limit)
        if found is not None:
            raise PayloadTooLarge(too_large_message(*found, limit))


def oversized(value: Any, path: str, limit: int) -> tuple[str, int] | None:
    """The first string over ``limit`` bytes and its path. A body may hold millions of small
    values (a million ``[]`` in a field no model reads), so the walk first only looks for
    such a string, with a stack of its own (a raw item may nest past the recursion limit
    here) and no path written; the path is found only for what it found."""
    if not _holds_oversized(value, limit):
        return None
    return _named(value, path, limit)


def _too_long(text: str, limit: int) -> int | None:
    # a str of n characters holds at most 4n UTF-8 bytes: encode only when it may matter
    if len(text) * 4 > limit and (size := len(text.encode("utf-8", "replace"))) > limit:
        return size
    return None


def _holds_oversized(value: Any, limit: int) -> bool:
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        value = pop()
        kind = type(value)
        if kind is str:
            if len(value) * 4 > limit and _too_long(value, limit) is not None:
                return True
        elif kind is dict:
            extend(value.values())
        elif kind is list or kind is tuple:
            extend(value)
        elif isinstance(value, BaseModel):
            extend(getattr(value, name) for name in type(value).model_fields)
        elif isinstance(value, str):
            stack.append(str(value))
        elif isinstance(value, Mapping):
            extend(value.values())
        elif isinstance(value, list | tuple):
            extend(value)
    return False


def _named(value: Any, path: str, limit: int) -> tuple[str, int] | None:
    """The path down to the first oversized string, known to be there: at each level, the
    first child that holds one (each subtree walked at most once a level)."""
    while True:
        if isinstance(value, str):
            size = _too_long(value, limit)
            return None if size is None else (path, size)
        if isinstance(value, BaseModel):
            value = {name: getattr(value, name) for name in type(value).model_fields}
        if isinstance(value, Mapping):
            children: Any = value.items()
            step = ".{}"
        elif isinstance(value, list | tuple):
            children, step = enumerate(value), "[{}]"
        else:
            return None
        for key, sub in children:
            if _holds_oversized(sub, limit):
                value, path = sub, path + step.format(key)
                break
        else:
            return None


_WALKED = (str, Mapping, list, tuple, BaseModel)  # what may hold a string


def refused(status: str, detail: str, verifier: str | None) -> Refused:
    # a name the server does not know is not a label: a client must not grow the metrics
    metrics.count_items(verifier or "none", status)
    score = 0.0 if status == RESPONSE_TOO_LONG else None
    return Refused(score=score, status=status, detail=detail)  # type: ignore[arg-type]


# A body up to this size is admitted on the event loop: it holds at most ~32 Ki JSON values
# (each takes two bytes or more), ~15 ms of validation at ~0.4 us a value, where a thread's
# hop would cost a one-completion request more than its admission. A 2 MiB body of values
# held the loop ~0.25 s.
INLINE_BODY_BYTES = 64 * 1024


def admitted_off_the_loop(body_bytes: int | None, settings: ServerSettings) -> bool:
    """Whether a body of ``body_bytes`` is admitted (walked and validated) on a thread: one
    whose values could cost the loop more than a thread's hop (unknown size: a thread)."""
    return (body_bytes is None or body_bytes > INLINE_BODY_BYTES
            or may_hold_oversized(body_bytes, settings))


def may_hold_oversized(body_bytes: int | None, settings: ServerSettings) -> bool:
    """Whether a field of a body of ``body_bytes`` can be over the field limit: a JSON text
    is at least as long as the UTF-8 of each string in it (an escape only lengthens it), so
    a body within the limit needs no walk over its fields (unknown size: walk)."""
    return body_bytes is None or body_bytes > settings.max_field_bytes


def admit(model: type[ItemBase], fields: Any, index: int, settings: ServerSettings,
          verifier: str, walk: bool = True, keyed: bool = False) -> ItemBase | Refused:
    """``fields`` as the verifier's item, or the result that says why not; ``walk=False``
    when no field can be over the size limit (``may_hold_oversized``); ``keyed``: its
    ``check_key`` made here too, for a verifier whose ``check`` the core runs."""
    where = f"items[{index}]"
    if not isinstance(fields, Mapping):
        return refused(INVALID_ITEM, f"{where}: an item is a JSON object, not "
                       f"{type(fields).__name__}", verifier)
    found = oversized(fields, where, settings.max_field_bytes) if walk else None
    if found is not None:
        path, size = found
        status = RESPONSE_TOO_LONG if path == f"{where}.response" else INVALID_ITEM
        return refused(status, too_large_message(path, size, settings.max_field_bytes),
                       verifier)
    try:  # the settings as context: a verifier's caps are its section's (verifiers/limits.py)
        item = model.model_validate(fields, context={"settings": settings})
        if keyed:
            item.check_key()
        return item
    except ValidationError as exc:
        return refused(INVALID_ITEM, format_validation_errors(exc.errors(), ("items", index)),
                       verifier)
    except Exception as exc:  # noqa: BLE001 - a plug-in's validator raising TypeError and
        # the like: that item refused, the batch and the other callers' items scored
        log.warning("verifier %s: its item validator raised %s", verifier, type(exc).__name__)
        return refused(INVALID_ITEM, f"{where}: the verifier could not read this item "
                       f"({type(exc).__name__})", verifier)


def admit_all(model: type[ItemBase], raw_items: Sequence[Any], settings: ServerSettings,
              verifier: str, on_invalid: OnInvalid, body_bytes: int | None = None,
              keyed: bool = False) -> list[ItemBase | Refused]:
    """Every item of a one-verifier batch admitted or refused; with ``on_invalid='error'``
    the first refusal refuses the request instead (413 for a size, one 422 for all schema
    errors). ``body_bytes``: the request body's size, when known."""
    walk = may_hold_oversized(body_bytes, settings)
    if on_invalid == "error" and walk:
        check_field_sizes(raw_items, settings)  # every field walked: admit need not again
        walk = False
    admitted = [admit(model, raw, i, settings, verifier, walk, keyed)
                for i, raw in enumerate(raw_items)]
    if on_invalid == "error":
        raise_refusals(admitted)
    return admitted


def raise_refusals(admitted: Sequence[ItemBase | Refused | None]) -> None:
    errors = [a.detail for a in admitted if isinstance(a, Refused)]
    if errors:
        raise InvalidItems("; ".join(errors))
