"""The ifeval item and result, and the shapes the datasets ship them in.

An item's instructions come in one of three shapes, each turned into the same list:

* ``instructions``: ``[{"instruction_id": "length_constraints:number_words", "kwargs":
  {"relation": "at least", "num_words": 300}}, ...]``;
* Google's IFEval rows: ``instruction_id_list`` and ``kwargs``, two parallel lists, each
  kwargs dict holding every parameter name (None where unused);
* open-instruct's ground truth (allenai's IFEval-style RLVR sets, its ``ifeval`` verifier):
  ``ground_truth``, the text ``[{"instruction_id": [...], "kwargs": [...]}]`` (Python's or
  JSON's notation), or that list or dict already decoded.
"""

from __future__ import annotations

import ast
import json
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from reward_server.errors import format_validation_errors
from reward_server.text import printable
from reward_server.verifiers import limits
from reward_server.verifiers.base import ItemBase, ResultBase
from reward_server.verifiers.ifeval.checks import INSTRUCTIONS, Kwargs
from reward_server.verifiers.ifeval.evaluate import Spec
from reward_server.verifiers.ifeval.settings import IfEvalSettings

KNOWN = ", ".join(sorted(INSTRUCTIONS))
MAX_GROUND_TRUTH_CHARS = 100_000  # a row's constraints are a few hundred characters


class Instruction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    instruction_id: str = Field(description=f"One of IFEval's 25 instruction ids: {KNOWN}.")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Its parameters, as IFEval names them (None values "
        "are dropped): docs/ifeval.md lists each instruction's.")
    _parsed: Kwargs = PrivateAttr()

    @field_validator("instruction_id")
    @classmethod
    def _known(cls, instruction_id: str) -> str:
        if instruction_id not in INSTRUCTIONS:
            raise ValueError(f"unknown instruction {instruction_id!r}; known: {KNOWN}")
        return instruction_id

    @model_validator(mode="after")
    def _parse_kwargs(self) -> Instruction:
        model = INSTRUCTIONS[self.instruction_id].kwargs
        try:
            self._parsed = model.model_validate(self.kwargs)
        except ValidationError as exc:
            raise ValueError(f"{self.instruction_id}: " + format_validation_errors(
                exc.errors(), ("kwargs",))) from None
        return self

    @property
    def spec(self) -> Spec:
        return self.instruction_id, self._parsed


def _instruction(instruction_id: Any, kwargs: Any, where: str) -> Instruction:
    """One instruction of a dataset's shape, an error naming where it came from."""
    try:
        return Instruction.model_validate({"instruction_id": instruction_id,
                                           "kwargs": {} if kwargs is None else kwargs})
    except ValidationError as exc:
        raise ValueError(f"{where}: {format_validation_errors(exc.errors())}") from None


def _parallel(ids: list[Any], kwargs: list[Any] | None, names: tuple[str, str]
              ) -> list[Instruction]:
    if kwargs is None:
        kwargs = [None] * len(ids)
    if len(ids) != len(kwargs):
        raise ValueError(f"{names[0]} has {len(ids)} entries and {names[1]} {len(kwargs)}: "
                         "they pair up one to one")
    return [_instruction(i, kw, f"{names[0]}[{n}]")
            for n, (i, kw) in enumerate(zip(ids, kwargs, strict=True))]


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    try:  # open-instruct writes str() of a Python list: single quotes, None
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        raise ValueError("ground_truth is neither JSON nor a Python literal") from None


def _capped(count: int, cap: int, where: str = "") -> None:
    if count > cap:
        raise PydanticCustomError("too_many_instructions", "{where}{count} instructions; at "
                                  "most {cap} (REWARD_SERVER_IFEVAL_MAX_INSTRUCTIONS)",
                                  {"where": where, "count": count, "cap": cap})


# the parameters that cost per entry or per character: compiled as patterns, searched for
_LISTS = ("keywords", "forbidden_words")
_PHRASES = ("keyword", "section_spliter", "postscript_marker")


def _check_sizes(found: list[Instruction], where: str, caps: IfEvalSettings) -> None:
    """Each keyword list and phrase within its cap; ``where`` places an instruction's
    parameters in the item's own shape ({n}: its index)."""
    for n, instruction in enumerate(found):
        kwargs = instruction.spec[1]
        for name in _LISTS:
            words = getattr(kwargs, name, None)
            if words is not None and len(words) > caps.max_keywords:
                raise PydanticCustomError("too_many_keywords", "{where}: {count} entries; at "
                                          "most {cap} (REWARD_SERVER_IFEVAL_MAX_KEYWORDS)", {
                                              "where": f"{where.format(n=n)}.{name}",
                                              "count": len(words), "cap": caps.max_keywords})
        for name in (*_LISTS, *_PHRASES):
            value = getattr(kwargs, name, None)
            for k, phrase in enumerate([value] if isinstance(value, str) else value or ()):
                if len(phrase) > caps.max_phrase_chars:
                    at = f"{name}[{k}]" if name in _LISTS else name
                    raise PydanticCustomError("phrase_too_long", "{where}: {count} characters; "
                                              "at most {cap} (REWARD_SERVER_IFEVAL_MAX_PHRASE_"
                                              "CHARS)", {"where": f"{where.format(n=n)}.{at}",
                                                         "count": len(phrase),
                                                         "cap": caps.max_phrase_chars})


def _from_ground_truth(truth: Any, cap: int) -> list[Instruction]:
    """open-instruct's IFEvalVerifier: ``literal_eval(label)[0]``, itself JSON text maybe,
    holding ``instruction_id`` and ``kwargs``."""
    if isinstance(truth, str):
        truth = _decode(truth)
    if isinstance(truth, list):
        if len(truth) != 1:
            raise ValueError(f"ground_truth is a list of {len(truth)} entries, not one")
        truth = truth[0]
    if isinstance(truth, str):
        truth = _decode(truth)
    if not isinstance(truth, dict):
        raise ValueError("ground_truth holds no {instruction_id, kwargs} object")
    if "func_name" in truth:
        raise ValueError("ground_truth names a func_name (allenai/RLVR-IFeval's if_functions "
                         "rules, which count differently from IFEval's): not supported; "
                         "give IFEval's instruction ids (docs/ifeval.md)")
    ids = truth.get("instruction_id")
    if isinstance(ids, str):
        ids, kwargs = [ids], [truth.get("kwargs")]
    else:
        kwargs = truth.get("kwargs")
    if not isinstance(ids, list) or not (kwargs is None or isinstance(kwargs, list)):
        raise ValueError("ground_truth: instruction_id and kwargs are lists")
    _capped(len(ids), cap, "ground_truth.instruction_id: ")  # before any is validated
    return _parallel(ids, kwargs, ("ground_truth.instruction_id", "ground_truth.kwargs"))


class IfEvalItem(ItemBase):
    response: str = Field(description="The model's completion.")
    instructions: list[Instruction] | None = Field(
        None, min_length=1, description="The instructions the response must follow.")
    instruction_id_list: list[str] | None = Field(
        None, min_length=1, description="Google's IFEval rows: the ids, with `kwargs`.")
    kwargs: list[dict[str, Any] | None] | None = Field(
        None, description="Google's IFEval rows: one parameter dict per id.")
    ground_truth: str | list[Any] | dict[str, Any] | None = Field(
        None, description="open-instruct's ifeval ground truth: "
        "[{\"instruction_id\": [...], \"kwargs\": [...]}], as text or decoded.")
    strict: bool = Field(True, description="False: IFEval's loose reading (also without the "
                         "first or last line, and without asterisks).")
    all_or_nothing: bool = Field(False, description="Score 1 only if every instruction is "
                                 "followed (IFEval's prompt-level accuracy), else 0.")
    _specs: tuple[Spec, ...] = PrivateAttr()

    @field_validator("ground_truth")
    @classmethod
    def _bounded(cls, truth: Any) -> Any:
        if isinstance(truth, str) and len(truth) > MAX_GROUND_TRUTH_CHARS:
            raise ValueError(f"longer than {MAX_GROUND_TRUTH_CHARS} characters")
        return truth

    @field_validator("instructions", "instruction_id_list", mode="before")
    @classmethod
    def _counted(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, list):  # before any instruction is validated
            _capped(len(value), limits.section(info, "ifeval", IfEvalSettings).max_instructions)
        return value

    @model_validator(mode="after")
    def _one_shape(self, info: ValidationInfo) -> IfEvalItem:
        given = [name for name in ("instructions", "instruction_id_list", "ground_truth")
                 if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give the instructions once: instructions, instruction_id_list "
                             f"(+ kwargs) or ground_truth (got {', '.join(given) or 'none'})")
        if self.kwargs is not None and given != ["instruction_id_list"]:
            raise ValueError("kwargs goes with instruction_id_list")
        caps = limits.section(info, "ifeval", IfEvalSettings)
        if self.instructions is not None:
            found, where = self.instructions, "instructions[{n}].kwargs"
        elif self.instruction_id_list is not None:
            found, where = _parallel(self.instruction_id_list, self.kwargs,
                                     ("instruction_id_list", "kwargs")), "kwargs[{n}]"
        else:
            found = _from_ground_truth(self.ground_truth, caps.max_instructions)
            where = "ground_truth.kwargs[{n}]"
            if not found:
                raise ValueError("ground_truth lists no instruction")
        _check_sizes(found, where, caps)
        self._specs = tuple(instruction.spec for instruction in found)
        return self

    @property
    def specs(self) -> tuple[Spec, ...]:
        """The instructions as validated, whichever shape they came in."""
        return self._specs


class Verdict(BaseModel):
    instruction_id: str
    followed: bool | None = Field(description="null where it could not be decided "
                                  "(status 'unavailable').")


# "timeout": a large response's checks ran past the limit (0); "unavailable": an
# instruction needs langdetect, which is not installed (null: not the response's doing);
# "not_run": its request's budget left it waiting for a worker (null)
IfEvalStatus = Literal["ok", "timeout", "unavailable", "not_run"]


class IfEvalResult(ResultBase):
    score: float | None = Field(description="The fraction of instructions followed (1 or 0 "
                                "with all_or_nothing); null for 'unavailable' and 'not_run'.")
    status: IfEvalStatus
    instructions: list[Verdict] = Field(default_factory=list)
    detail: str | None = None

    @field_validator("detail")
    @classmethod
    def _printable(cls, text: str | None) -> str | None:
        return None if text is None else printable(text)
