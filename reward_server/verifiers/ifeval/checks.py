"""IFEval's 25 instructions: each one's parameters (a pydantic model, so a bad one is refused
naming the field) and its rule, as the reference decides it (lm-eval's
``lm_eval/tasks/ifeval/instructions.py``, Google's own code). Where ours differs, the rule
says why; docs/ifeval.md lists every difference.

A rule is a pure function of the response and its parameters. IFEval's own items hold the
prompt's parameters, never random ones: a parameter the reference would draw at random when
it is missing is required here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from reward_server.verifiers.ifeval import language, scans
from reward_server.verifiers.ifeval.sentences import count_sentences, word_tokens

Relation = Literal["less than", "at least"]
Count = StrictInt  # a count is a JSON integer: true is no number of words
_WORD = re.compile(r"\w+")
# An item's instructions read the same texts (its response, or loose mode's eight copies):
# the analyses that cost most per character are made once per text, and each phrase
# compiled once, so repeating an instruction costs nothing (an item's caps: settings.py)
_TEXTS = 16
_PHRASES = 4096


class Kwargs(BaseModel):
    """An instruction's parameters. Google's IFEval rows give every instruction every
    parameter name, None where unused: a None is dropped, any other unknown name refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_nones(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def _compare(count: int, relation: Relation, threshold: int) -> bool:
    return count < threshold if relation == "less than" else count >= threshold


@lru_cache(maxsize=_PHRASES)
def _phrase(text: str) -> re.Pattern[str]:
    """A keyword as the reference's ``re.search(keyword, ..., IGNORECASE)`` reads it, but
    literal: the reference passes it to ``re`` unescaped ('C++' is an error there, a hostile
    one a catastrophic pattern)."""
    return re.compile(re.escape(text), re.IGNORECASE)


class NoKwargs(Kwargs):
    pass


class Language(Kwargs):
    language: str = Field(description="ISO 639-1 code, as langdetect names it: en, fr, zh-cn.")


@lru_cache(maxsize=_TEXTS)
def _language(text: str) -> str | None:
    return language.detect(text)  # seeded: a function of the text


def response_language(text: str, kw: Language) -> bool:
    # the reference counts a text langdetect cannot read (digits, punctuation) as followed;
    # the response caused that, so it is not
    return _language(text) == kw.language


class NumberSentences(Kwargs):
    relation: Relation
    num_sentences: Count


_sentences = lru_cache(maxsize=_TEXTS)(count_sentences)
_bullets = lru_cache(maxsize=_TEXTS)(scans.count_bullets)


def number_sentences(text: str, kw: NumberSentences) -> bool:
    return _compare(_sentences(text), kw.relation, kw.num_sentences)


class NumberPlaceholders(Kwargs):
    num_placeholders: Count


def number_placeholders(text: str, kw: NumberPlaceholders) -> bool:
    return scans.count_placeholders(text) >= kw.num_placeholders


class NumberBullets(Kwargs):
    num_bullets: Count


def number_bullet_lists(text: str, kw: NumberBullets) -> bool:
    return _bullets(text) == kw.num_bullets


CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def constrained_response(text: str, kw: NoKwargs) -> bool:
    return any(option in text for option in CONSTRAINED_RESPONSES)


class NumberHighlights(Kwargs):
    num_highlights: Count


_HIGHLIGHT = re.compile(r"\*[^\n\*]*\*")
_DOUBLE_HIGHLIGHT = re.compile(r"\*\*[^\n\*]*\*\*")


def number_highlighted_sections(text: str, kw: NumberHighlights) -> bool:
    count = sum(1 for m in _HIGHLIGHT.finditer(text) if m.group().strip("*").strip())
    count += sum(1 for m in _DOUBLE_HIGHLIGHT.finditer(text) if m.group()[2:-2].strip())
    return count >= kw.num_highlights


class Sections(Kwargs):
    section_spliter: str = Field(description="The word that opens a section: Section, SECTION.")
    num_sections: Count


@lru_cache(maxsize=_PHRASES)
def _splitter(word: str) -> re.Pattern[str]:
    # the reference builds this regex from the splitter unescaped; escaped, a word reads the same
    return re.compile(r"\s?" + re.escape(word.strip()) + r"\s?\d+\s?")


def multiple_sections(text: str, kw: Sections) -> bool:
    return sum(1 for _ in _splitter(kw.section_spliter).finditer(text)) >= kw.num_sections


class NumberParagraphs(Kwargs):
    num_paragraphs: Count


_DIVIDER = re.compile(r"\s?\*\*\*\s?")


def number_paragraphs(text: str, kw: NumberParagraphs) -> bool:
    paragraphs = _DIVIDER.split(text)
    count = len(paragraphs)
    for index, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if index in (0, len(paragraphs) - 1):
                count -= 1
            else:
                return False
    return count == kw.num_paragraphs


class Postscript(Kwargs):
    postscript_marker: str = Field(description="P.S. or P.P.S (or any other marker).")


_PS = re.compile(r"p\.\s?s\.")
_PPS = re.compile(r"p\.\s?p\.\s?s")


def postscript(text: str, kw: Postscript) -> bool:
    # the reference's patterns open with \s* and end with .*$, which match anywhere they can:
    # found the same without them (a leading \s* on 2 MiB of spaces is quadratic)
    lowered, marker = text.lower(), kw.postscript_marker.strip()
    if marker == "P.P.S":
        return _PPS.search(lowered) is not None
    if marker == "P.S.":
        return _PS.search(lowered) is not None
    return marker.lower() in lowered


class Keywords(Kwargs):
    keywords: list[str] = Field(min_length=1)


def existence(text: str, kw: Keywords) -> bool:
    return all(_phrase(word).search(text) for word in kw.keywords)


class KeywordFrequency(Kwargs):
    keyword: str
    frequency: Count
    relation: Relation


def frequency(text: str, kw: KeywordFrequency) -> bool:
    found = sum(1 for _ in _phrase(kw.keyword.strip()).finditer(text))
    return _compare(found, kw.relation, kw.frequency)


class NumberWords(Kwargs):
    num_words: Count
    relation: Relation


def number_words(text: str, kw: NumberWords) -> bool:
    return _compare(sum(1 for _ in _WORD.finditer(text)), kw.relation, kw.num_words)


def json_format(text: str, kw: NoKwargs) -> bool:
    value = text.strip()
    for fence in ("```json", "```Json", "```JSON", "```"):  # one after the other, as there
        value = value.removeprefix(fence)
    value = value.removesuffix("```").strip()
    try:
        json.loads(value)
    except (ValueError, RecursionError):  # nested past the parser's depth: no JSON we take
        return False
    return True


class ParagraphFirstWord(Kwargs):
    num_paragraphs: Count
    nth_paragraph: Count = Field(ge=1)
    first_word: str


def nth_paragraph_first_word(text: str, kw: ParagraphFirstWord) -> bool:
    paragraphs = text.split("\n\n")
    count = sum(1 for p in paragraphs if p.strip())
    if kw.nth_paragraph > count:
        return False
    paragraph = paragraphs[kw.nth_paragraph - 1].strip()
    if not paragraph:
        return False
    first = paragraph.split()[0].strip().lstrip("'").lstrip('"')
    word = re.match(r"[^.,?!'\"]*", first).group().lower()  # type: ignore[union-attr]
    return count == kw.num_paragraphs and word == kw.first_word.lower()


class ForbiddenWords(Kwargs):
    forbidden_words: list[str] = Field(min_length=1)


@lru_cache(maxsize=_PHRASES)
def _whole_word(word: str) -> re.Pattern[str]:
    return re.compile(r"\b" + re.escape(word) + r"\b", re.IGNORECASE)


def forbidden_words(text: str, kw: ForbiddenWords) -> bool:
    return not any(_whole_word(word).search(text) for word in set(kw.forbidden_words))


def two_responses(text: str, kw: NoKwargs) -> bool:
    parts = text.split("******")
    valid = []
    for index, part in enumerate(parts):
        if part.strip():
            valid.append(part)
        elif index not in (0, len(parts) - 1):
            return False
    return len(valid) == 2 and valid[0].strip() != valid[1].strip()


class RepeatPrompt(Kwargs):
    prompt_to_repeat: str = Field(min_length=1)


def repeat_prompt(text: str, kw: RepeatPrompt) -> bool:
    return text.strip().lower().startswith(kw.prompt_to_repeat.strip().lower())


class EndPhrase(Kwargs):
    end_phrase: str = Field(min_length=1)


def end_checker(text: str, kw: EndPhrase) -> bool:
    return text.strip().strip('"').lower().endswith(kw.end_phrase.strip().lower())


def title(text: str, kw: NoKwargs) -> bool:
    return any(found.lstrip("<").rstrip(">").strip() for found in scans.titles(text))


class LetterFrequency(Kwargs):
    letter: str = Field(pattern=r"^[A-Za-z]$", description="One ASCII letter.")
    let_frequency: Count
    let_relation: Relation


def letter_frequency(text: str, kw: LetterFrequency) -> bool:
    found = text.lower().count(kw.letter.lower())
    return _compare(found, kw.let_relation, kw.let_frequency)


def english_capital(text: str, kw: NoKwargs) -> bool:
    return text.isupper() and _language(text) in ("en", None)


def english_lowercase(text: str, kw: NoKwargs) -> bool:
    return text.islower() and _language(text) in ("en", None)


def no_comma(text: str, kw: NoKwargs) -> bool:
    return "," not in text


class CapitalFrequency(Kwargs):
    capital_frequency: Count
    capital_relation: Relation


@lru_cache(maxsize=_TEXTS)
def _capitals(text: str) -> int:
    return sum(1 for token in word_tokens(text) if token.isupper())


def capital_word_frequency(text: str, kw: CapitalFrequency) -> bool:
    return _compare(_capitals(text), kw.capital_relation, kw.capital_frequency)


def quotation(text: str, kw: NoKwargs) -> bool:
    value = text.strip()
    return len(value) > 1 and value[0] == '"' and value[-1] == '"'


@dataclass(frozen=True)
class Check:
    kwargs: type[Kwargs]
    rule: Callable[[str, Any], bool]
    needs_language: bool = False  # langdetect decides it
    # its pass over the text against a regex scan's: the tokenizers walk it in Python
    # (the verifier's cost estimate, ifeval/__init__.py)
    weight: int = 1


INSTRUCTIONS: dict[str, Check] = {
    "keywords:existence": Check(Keywords, existence),
    "keywords:frequency": Check(KeywordFrequency, frequency),
    "keywords:forbidden_words": Check(ForbiddenWords, forbidden_words),
    "keywords:letter_frequency": Check(LetterFrequency, letter_frequency),
    "language:response_language": Check(Language, response_language, needs_language=True),
    "length_constraints:number_sentences": Check(NumberSentences, number_sentences,
                                                         weight=4),
    "length_constraints:number_paragraphs": Check(NumberParagraphs, number_paragraphs),
    "length_constraints:number_words": Check(NumberWords, number_words),
    "length_constraints:nth_paragraph_first_word": Check(ParagraphFirstWord,
                                                         nth_paragraph_first_word),
    "detectable_content:number_placeholders": Check(NumberPlaceholders, number_placeholders),
    "detectable_content:postscript": Check(Postscript, postscript),
    "detectable_format:number_bullet_lists": Check(NumberBullets, number_bullet_lists),
    "detectable_format:constrained_response": Check(NoKwargs, constrained_response),
    "detectable_format:number_highlighted_sections": Check(NumberHighlights,
                                                           number_highlighted_sections),
    "detectable_format:multiple_sections": Check(Sections, multiple_sections),
    "detectable_format:json_format": Check(NoKwargs, json_format),
    "detectable_format:title": Check(NoKwargs, title),
    "combination:two_responses": Check(NoKwargs, two_responses),
    "combination:repeat_prompt": Check(RepeatPrompt, repeat_prompt),
    "startend:end_checker": Check(EndPhrase, end_checker),
    "startend:quotation": Check(NoKwargs, quotation),
    "change_case:capital_word_frequency": Check(CapitalFrequency, capital_word_frequency,
                                                weight=4),
    "change_case:english_capital": Check(NoKwargs, english_capital, needs_language=True),
    "change_case:english_lowercase": Check(NoKwargs, english_lowercase, needs_language=True),
    "punctuation:no_comma": Check(NoKwargs, no_comma),
}
