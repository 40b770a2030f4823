"""The format verifier's item and result schemas: a response, the rules it is held to (a
name, or an object with the rule's options), and a verdict per rule."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from reward_server.verifiers import limits
from reward_server.verifiers.base import ItemBase, ResultBase
from reward_server.verifiers.format import patterns, rules
from reward_server.verifiers.format.patterns import Search
from reward_server.verifiers.format.rules import BuiltIn, Outcome
from reward_server.verifiers.format.settings import FormatSettings

NO_REGION = "the reasoning never ends (no </think>): no final answer after it"


class _Rule(BaseModel):
    """A rule is its options and ``check(text)``, its outcome on the text (or the regex
    search it waits for): a new rule is one more class in ``Rule``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    weight: float = Field(1.0, ge=0, description="Its share of the item's score.")

    @property
    def name(self) -> str:
        return self.rule  # type: ignore[attr-defined]


class ThinkRule(_Rule):
    """TRL's think_format_reward: opens with <think>, holds no second one, closes it."""

    rule: Literal["think"]

    def check(self, text: str) -> Outcome:
        return rules.think(text)


class ThinkAnswerRule(_Rule):
    """open-r1's format_reward, or (strict) one think block then one answer block."""

    rule: Literal["think_answer"]
    strict: bool = Field(False, description="false: open-r1's format_reward verdicts "
                         "('<think>\\n…\\n</think>\\n<answer>\\n…\\n</answer>' at the start, "
                         "lines after it allowed). true: any whitespace around the tags, each "
                         "tag exactly once, nothing outside the two blocks, a non-blank "
                         "answer; tags in fenced code are text.")

    def check(self, text: str) -> Outcome:
        return (rules.think_answer_strict if self.strict else rules.think_answer_r1)(text)


class TagCountRule(_Rule):
    """open-r1's tag_count_reward: 0.25 for each of the four tags found exactly once."""

    rule: Literal["tag_count"]

    def check(self, text: str) -> Outcome:
        return rules.tag_count(text)


class FinalAnswerRule(_Rule):
    """The response states a final answer in the required form."""

    rule: Literal["final_answer"]
    pattern: BuiltIn | None = Field(None, description="A built-in form: 'boxed' (the last "
                                    "\\boxed{…} closes around a non-blank answer), "
                                    "'answer_line' (a line 'Answer: …'), 'answer_tag' "
                                    "(<answer>…</answer>). Default 'boxed' when no regex.")
    regex: str | None = Field(None, description="Your own pattern (Python re), compiled "
                              "and searched for in a worker under a time limit: a match "
                              "passes; one that does not compile makes the item invalid_item.")
    flags: str = Field("", description="Flags of regex: any of i (ignore case), m "
                       "(multiline), s (dot matches newline), x (verbose).")
    after_think: bool = Field(True, description="Search only after the reasoning block "
                              "(an unclosed <think> has no final answer).")
    ignore_code: bool = Field(True, description="Fenced code and tool output are cut out "
                              "first: an answer printed by a program is not the model's.")

    @field_validator("regex")
    @classmethod
    def _bounded(cls, regex: str | None, info: ValidationInfo) -> str | None:
        # what costs nothing to find; compiling it is a worker's (patterns.py)
        if regex is not None:
            cap = limits.section(info, "format", FormatSettings).max_pattern_chars
            problem = patterns.check(regex, cap)
            if problem is not None:
                raise PydanticCustomError("regex", problem)
        return regex

    @model_validator(mode="after")
    def _one_form(self) -> FinalAnswerRule:
        if self.regex is not None:
            if self.pattern is not None:
                raise ValueError("give 'pattern' (built-in) or 'regex', not both")
            problem = patterns.check_flags(self.flags)
            if problem is not None:
                raise ValueError(problem)
        elif self.flags:
            raise ValueError("'flags' apply to a 'regex' only")
        return self

    @property
    def form(self) -> str:
        return "regex" if self.regex is not None else (self.pattern or "boxed")

    @property
    def name(self) -> str:
        return f"final_answer:{self.form}"

    def check(self, text: str) -> Outcome | Search:
        region = rules.answer_region(text, self.after_think, self.ignore_code)
        if region is None:
            return Outcome(0.0, NO_REGION)
        if self.regex is not None:
            return Search(self.regex, self.flags, region)
        return rules.PATTERNS[self.form](region)


Rule = Annotated[ThinkRule | ThinkAnswerRule | TagCountRule | FinalAnswerRule,
                 Field(discriminator="rule")]


class FormatItem(ItemBase):
    response: str = Field(description="The model's completion.")
    rules: list[Rule] = Field(min_length=1, description=(
        "The rules, each a name ('think', 'think_answer', 'tag_count', 'final_answer') or an "
        "object {rule, ...options, weight}; at most REWARD_SERVER_FORMAT_MAX_RULES (16)."))
    prefix: str = Field("", description="Text the prompt ended with that belongs to the "
                        "completion's format, e.g. '<think>\\n' when the chat template opens "
                        "the think block: the rules read prefix + response.")
    all_or_nothing: bool = Field(False, description="Score 1 only when every rule scores 1, "
                                 "else 0 (default: the rules' weighted mean).")

    @field_validator("rules", mode="before")
    @classmethod
    def _names(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, list):  # counted before any rule is validated
            cap = limits.section(info, "format", FormatSettings).max_rules
            if len(value) > cap:
                raise PydanticCustomError("too_many_rules", "{count} rules; at most {cap} "
                                          "(REWARD_SERVER_FORMAT_MAX_RULES)",
                                          {"count": len(value), "cap": cap})
            return [{"rule": v} if isinstance(v, str) else v for v in value]
        return value

    @model_validator(mode="after")
    def _weighted(self) -> FormatItem:
        if not any(rule.weight > 0 for rule in self.rules):
            raise ValueError("every rule has weight 0: nothing to score")
        return self

    @property
    def text(self) -> str:
        return self.prefix + self.response


RuleStatus = Literal["ok", "timeout", "not_run", "unavailable", "invalid_item"]


class RuleVerdict(BaseModel):
    rule: str = Field(description="The rule's name; a final_answer's form after a colon "
                      "(final_answer:boxed, final_answer:regex).")
    score: float | None = Field(description="In [0, 1] (tag_count in steps of 0.25); null "
                                "for not_run, unavailable and invalid_item.")
    passed: bool | None = Field(description="score == 1.")
    status: RuleStatus = "ok"
    reason: str | None = Field(None, description="Why it did not pass.")
    match: str | None = Field(None, description="What a final_answer found (200 characters).")


Status = Literal["ok", "timeout", "not_run", "unavailable", "invalid_item"]


class FormatResult(ResultBase):
    score: float | None = Field(description="The rules' weighted mean (or all or nothing); "
                                "null when a rule could not be checked (not_run, unavailable, "
                                "invalid_item).")
    status: Status = Field(description="ok; timeout (a regex search ran out of time: that "
                           "rule scores 0); not_run or unavailable (a regex was never "
                           "searched: null); invalid_item (a regex does not compile, or "
                           "compiling it ran out of time: null; detail names it).")
    rules: list[RuleVerdict]
    detail: str | None = Field(None, description="For invalid_item: which regex, and why "
                               "(rules[1].regex: regex does not compile: ...).")
