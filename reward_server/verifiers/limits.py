"""A verifier's per-item caps, read while an item is validated: the admitting server's
settings section (``admission.admit`` hands the server's settings to pydantic as the
validation context), or the section's defaults for an item built outside a server (a test,
a bench's in-process baseline).

A cap is checked before the work it bounds: a list's length in a ``mode="before"``
validator, so 10,000 rules are refused without validating one of them."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationInfo

M = TypeVar("M", bound=BaseModel)

# (server settings, prefix) -> its section: an item validates it once, not once per field
_sections: dict[tuple[int, str], tuple[Any, BaseModel]] = {}
_defaults: dict[type[BaseModel], BaseModel] = {}


def section(info: ValidationInfo, prefix: str, model: type[M]) -> M:
    """The ``prefix`` section of the settings the item is being admitted under."""
    settings = (info.context or {}).get("settings") if isinstance(info.context, dict) else None
    if settings is None or prefix not in getattr(settings, "sections", {}):
        found = _defaults.get(model)
        if found is None:
            found = _defaults[model] = model()
        return found  # type: ignore[return-value]
    key = (id(settings), prefix)
    cached = _sections.get(key)
    if cached is None or cached[0] is not settings:  # an id reused by a new settings object
        cached = _sections[key] = (settings, settings.section(prefix))
    return cached[1]  # type: ignore[return-value]
