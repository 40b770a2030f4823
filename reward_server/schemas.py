"""Request and response models of the HTTP API v1 that do not belong to one verifier."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, create_model

from reward_server.admission import Refused
from reward_server.pipeline import PipelineResult
from reward_server.provenance import Provenance
from reward_server.verifiers.base import ItemBase, ResultBase


class RewardsRequest(BaseModel):
    items: list[Any] = Field(
        description="Each item names its verifier ('verifier': 'math') plus that verifier's "
        "fields, as in POST /v1/verify/<verifier>; an item that is not one gets a result of "
        "its own (status invalid_item)."
    )


class RewardsResponse(BaseModel):
    rewards: list[float | None] = Field(
        description="One reward per item, in order; null when the item could not be scored "
        "for a reason outside the response (sandbox unavailable, an invalid item)."
    )
    results: list[dict[str, Any]] = Field(
        description="Each verifier's full result, plus 'verifier'."
    )
    provenance: dict[str, Provenance] = Field(
        default_factory=dict, description="What produced the results: a block per verifier "
        "named in them, by name (reward_server/provenance.py).")


class VerifierInfo(BaseModel):
    name: str
    description: str
    endpoint: str
    item_schema: dict[str, Any]
    result_schema: dict[str, Any]
    provenance: Provenance | None = None


class VerifiersResponse(BaseModel):
    verifiers: list[VerifierInfo]


class Health(BaseModel):
    status: str = "ok"
    verifiers: list[str]
    instance: str = Field(description="host:pid of the process that answered (which replica "
                          "and worker, behind a load balancer).")


def verify_models(
    name: str, item_model: type[ItemBase], result_model: type[ResultBase], checks: bool = False
) -> tuple[type[BaseModel], type[BaseModel]]:
    """The body and response models of ``POST /v1/verify/<name>``; ``checks``: the core runs
    the verifier's ``check``, and answers an item it stopped with a ``PipelineResult``."""
    title = "".join(part.capitalize() for part in name.split("_"))
    request = create_model(f"{title}VerifyRequest", items=(list[item_model], ...))  # type: ignore[valid-type]
    # an item that fails its checks gets a Refused result in its place (admission.py)
    results = result_model | Refused | PipelineResult if checks else result_model | Refused
    response = create_model(f"{title}VerifyResponse",
                            results=(list[results], ...),  # type: ignore[valid-type]
                            provenance=(Provenance | None, Field(
                                None, description="What produced the results.")))
    return request, response
