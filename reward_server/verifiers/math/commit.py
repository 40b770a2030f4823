"""The committed final answer: which part of a completion states the answer it stands by.

A reasoning model writes drafts, checks, code and tool output before it answers, and only
its last word is its answer. Paying anything else pays a guess: a box in a draft the model
later abandoned, the last number of a sentence cut off by the length limit, one of two
answers offered under two readings of the question. The rules (docs/math.md, "The committed
final answer", states them with their reasons), each a pure text scan, linear in the text:

1. ``think="strip"`` (default): only the text after the last ``</think>`` counts; a
   ``<think>`` that never closes commits to nothing (the model was cut off while thinking).
   ``"keep"``: the whole text (a model whose template writes no reasoning block).
2. Code blocks (fenced with ```), tool calls and tool output are not statements: an answer
   that appears only in a code comment or a program's printed output is no answer.
3. Then the answer markers, the last one wins (``markers``): the last box, the Minerva
   "final answer is $x$", a GSM8K ``####`` line, a bolded final line, and in prose an
   explicit statement ("the answer is …", "Answer: …"). Without any of them (``auto``), the
   last number or math span of a text that ends as a sentence ends: a text that stops
   mid-sentence was cut off and commits to nothing.
4. A response that commits to two different values commits to none: two boxes under two
   readings ("if …, \\boxed{1/3}; otherwise \\boxed{1/6}"), a hedge between values in the
   sentence that answers ("8, though 10 would also be defensible"). A negated candidate
   ("not 9 but 11") is no answer; what it is contrasted with is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from reward_server.text import (
    OPEN_ANSWER,
    Span,
    after_reasoning,
    boxes_from_end,
    last_match,
    without_code,
)
from reward_server.verifiers.math.markers import (
    EMPTY_BOX,
    Answer,
    ExtractMode,
    answer_span,
    box_group,
    ending,
    last_box_open,
    last_hashes,
    minerva,
    with_unicode_math,
)

ThinkMode = Literal["strip", "keep"]
Marker = Literal["answer_tag", "boxed", "final_answer", "hashes", "bold"]
MARKERS: tuple[Marker, ...] = ("answer_tag", "boxed", "final_answer", "hashes", "bold")

NO_ANSWER = "no answer found (box, 'final answer is', '####', 'answer:', $…$ or a number)"
NO_BOX = "no boxed answer (extract: 'boxed')"
NEVER_CLOSED = "the reasoning (<think>) never closes: the completion was cut off before it answered"
CUT_MID_SENTENCE = ("the text stops mid-sentence and marks no answer: its last number is where "
                    "it was cut off, not an answer")
TWO_READINGS = "two different answers under two readings (otherwise, alternatively, if …)"
HEDGED = "the answering sentence hedges between several values"
LAST_BOX_OPEN = "the last box never closes: the answer was cut off"
ANSWER_OPEN = "the <answer> tag never closes: the answer was cut off"
NEGATED_BOX = "the box is negated ('the answer is not \\boxed{9}'): no answer"
TRUNCATED = ("cut off at the length limit (truncated), and no marked answer closes before "
             "the cut")


@dataclass(frozen=True)
class NoCommitment:
    """Why a response commits to no single answer: a verdict of 0 with its reason.
    ``status`` "no_answer" when it states none, "ok" when it states several."""

    detail: str
    status: Literal["no_answer", "ok"] = "no_answer"


# --- 1-2. reasoning blocks, code and tool output (reward_server.text) ------------------------

def after_thinking(response: str, think: ThinkMode) -> str | None:
    """The text after the last reasoning block (``reward_server.text.after_reasoning``); the
    whole text for ``think="keep"``; None when a reasoning block never closes."""
    return response if think == "keep" else after_reasoning(response)


# --- 3. how the text ends ------------------------------------------------------------------

# a chat template's tokens that a decoder left in (a model that did not stop at its turn)
_TEMPLATE_TAIL = re.compile(r"(?:\s|<\|[a-z_]{1,20}\|>(?:user|assistant|system)?|</s>)*\Z")
# what a finished text may end with: a sentence mark, a closed math span or bracket, a
# number (with a currency or unit sign), or a number and up to two words of unit
_ENDS_COMPLETE = re.compile(
    r"(?:[.!?…)\]}$%€£°²³*。！？．]|\\\)|\\\]|\d"
    r"|[\d$}][ \t]*[A-Za-z²³/]{1,12}(?:[ \t]+[A-Za-z]{1,12})?)\Z")
_FUNCTION_WORDS = {"and", "then", "so", "but", "or", "the", "a", "an", "to", "of", "we",
                   "is", "are", "by", "with", "which", "that", "for", "in", "on", "it", "this",
                   "if", "as", "from", "at", "be", "was", "has", "have", "get", "gives"}


def without_template_tail(text: str) -> str:
    return text[: _TEMPLATE_TAIL.search(text[-400:]).start() + max(0, len(text) - 400)]


def ends_complete(text: str) -> bool:
    """Whether ``text`` ends as a finished sentence ends (``… is 72.``, ``I think it is 42``,
    ``$x^2$``, ``28 percent``), not mid-sentence (``… to get 72 and then we``)."""
    tail = without_template_tail(text)[-200:]
    found = _ENDS_COMPLETE.search(tail)
    if found is None:
        return False
    words = re.findall(r"[A-Za-z]+", found.group())
    return not any(w.lower() in _FUNCTION_WORDS for w in words)


# --- 3. a bolded final line ----------------------------------------------------------------

_BOLD = re.compile(r"\*\*([^*\n]{1,300})\*\*")
_LABEL = re.compile(r"\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:：]?\s*", re.IGNORECASE)
_MATH_SPAN = re.compile(r"\$[^$]*\$|\\\(.*?\\\)")
_WORDS_ONLY = re.compile(r"[A-Za-z][A-Za-z '\-]*[a-z][A-Za-z '\-]*")


def bold_final_line(text: str) -> tuple[str, ...] | None:
    """The answer a bolded final line states, as LaTeX: ``**Tuesday**`` (as
    ``\\text{Tuesday}``), ``**Answer: 12**``, ``**Final Answer:** 12``; several distinct
    bold values there are several answers. None when the last line has no bold value (a
    bold label such as ``**Step 3:**`` states nothing)."""
    stripped = without_template_tail(text).rstrip()
    line = stripped[stripped.rfind("\n") + 1:]
    if "**" not in line or len(line) > 600:
        return None
    found: list[str] = []
    for bold in _BOLD.finditer(line):
        content = bold.group(1).strip()
        label = _LABEL.match(content)
        if label and label.end() == len(content):  # "**Final Answer:** 12": after it
            content = line[bold.end():].strip()
        elif label and label.end() > 0 and re.match(r"\s*(?:the\s+)?(?:final\s+)?answer", content,
                                                     re.IGNORECASE):
            content = content[label.end():]
        elif content.endswith(":"):
            continue  # a label of something else
        content = content.strip().rstrip(".").strip()
        if len(_MATH_SPAN.sub("x", content).split()) > 4:
            return None  # a bold sentence ("**So she sold 72 clips.**"): prose, read as prose
        content = _as_latex(content)
        if content and content not in found:
            found.append(content)
    return tuple(found) or None


def _as_latex(content: str) -> str:
    """A bold span's math: its ``$…$`` delimiters dropped; words as ``\\text{…}``."""
    for opener, closer in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if (content.startswith(opener) and content.endswith(closer)
                and len(content) > 2 * len(opener)):
            return content[len(opener): -len(closer)].strip()
    if _WORDS_ONLY.fullmatch(content):
        return "\\text{" + content + "}"
    return content


# --- 4. two readings, hedges, negations ----------------------------------------------------

# between two boxes with different answers: the second is an alternative, not a correction
_ALTERNATIVE = re.compile(
    r"\b(?:otherwise|alternatively|alternately|on the other hand|depending|either|"
    r"or if|if instead|if,? however|another (?:reading|interpretation|case)|"
    r"(?:other|second|alternative) (?:reading|interpretation|case)|in case)\b"
    r"|\bcase\s*\(?(?:\d{1,3}|[a-d]|[ivx]{1,4})(?![a-z\d])",  # "Case 1: … Case 2: …"
    re.IGNORECASE)
_CONDITION = re.compile(r"\b(?:if|when|assuming|suppose|for)\b", re.IGNORECASE)


def two_readings(between: str, before_first: str) -> bool:
    """Whether the text between two boxes that state different answers (``between``) offers
    the second as an alternative to the first: "otherwise", "alternatively", or a condition
    on each ("If the coins are distinguishable, \\boxed{1/3}. If they are not, \\boxed{1/6}").
    A correction ("\\boxed{1}, then correcting: \\boxed{2}") is not one: the last box counts."""
    if _ALTERNATIVE.search(between):
        return True
    return bool(_CONDITION.search(between) and _CONDITION.search(before_first[-200:]))


# a candidate value: a number, or a math span with a digit in it ($f(x)$ names no value)
_VALUE = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)*(?![\w])|\$[^$\n\d]{0,40}\d[^$\n]{0,40}\$")
_HEDGE = re.compile(
    r"\b(?:though|although|alternatively|otherwise|perhaps|maybe|possibly|either|unsure"
    r"|not sure|defensible|arguably|depending|or)\b", re.IGNORECASE)
# "the answer is", "Answer:", "the correct option is", "答案是": a statement of the answer
_ANCHOR = re.compile(r"(?:answer|option|choice)\b[^\n.]{0,40}?(?:\bis\b|:)"
                     r"|答案[^\n。]{0,10}?(?:是|为|為|：|:)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|[。！？]|\n")


def answering_sentence(text: str, cut: bool = False) -> tuple[str, bool, bool]:
    """The sentence that answers: the last "answer is" / "answer:" statement's, else the
    last sentence of the text; whether it is a statement, and whether it ends before the
    text does. ``cut``: the text was cut off, so a "." that ends the text right after a
    digit ends nothing (it may be the decimal point of 7.5)."""
    tail = without_template_tail(text[-2000:])
    anchor = last_match(_ANCHOR, tail)
    if anchor is not None:
        end = _SENTENCE_END.search(tail, anchor.end())
        if (cut and end is not None and end.end() == len(tail) and tail[end.start()] == "."
                and tail[end.start() - 1].isdigit()):
            end = None
        return tail[anchor.start(): end.start() if end else len(tail)], True, end is not None
    stripped = tail.rstrip().rstrip(".!?")
    last_end = last_match(_SENTENCE_END, stripped)
    return stripped[last_end.end() if last_end else 0:], False, True


def hedges(sentence: str) -> bool:
    """Whether ``sentence`` names two different values and hedges between them ("I think it
    is 8, though 10 would also be defensible", "3 or maybe 4")."""
    if _HEDGE.search(sentence) is None:
        return False
    values = {v.strip("$ ").replace(",", "") for v in _VALUE.findall(sentence)}
    return len(values) >= 2


# "not 9 but 11", "isn't 9, it's 11", "not 9; rather 11": the negated value is no answer
_NUMBERISH = r"(?:\$[^$\n]{1,60}\$|-?\d[\d.,/]{0,30})"
_NOT_BUT = re.compile(
    r"(?:\bnot|n't|\bnever)\s+(?:equal\s+to\s+|exactly\s+)?" + _NUMBERISH
    + r"\s*(?:[,;]\s*)?(?:but|rather|it's|it is|instead)\s+(?:it's\s+|it is\s+|rather\s+)?",
    re.IGNORECASE)
# "Sam keeps 30 stamps, 6 fewer than his sister": a clause of comparison after the answer
_COMPARISON = re.compile(
    r",\s*(?:which is\s+|that is\s+|i\.e\.\s*)?" + _NUMBERISH + r"\s*(?:[A-Za-z]+\s+){0,2}?"
    r"(?:fewer|more|less|greater|older|younger|larger|smaller|taller|shorter|longer|higher"
    r"|lower|heavier|lighter|times|percent)\b[^.\n]{0,200}", re.IGNORECASE)


def rewrite_prose(text: str) -> str:
    """The prose a reader of its last number needs: a negated value contrasted with another
    dropped ("The answer is not 9 but 11" reads 11), and a comparison clause after the
    answer dropped ("Sam keeps 30 stamps, 6 fewer than his sister" reads 30)."""
    if "not" in text or "n't" in text or "never" in text:
        text = _NOT_BUT.sub(" ", text)
    if "," in text:
        text = _COMPARISON.sub("", text)
    return text


# what negates the value right after it: "not", "not quite", "cannot be", "anything but"
_NEGATION = (r"(?:\bnot|n't|\bnever|\bcannot|\banything\s+but|\bother\s+than|\brather\s+than"
             r"|\binstead\s+of)\s+(?:(?:be|quite|simply|just|merely|really|necessarily|exactly"
             r"|equal|to|possibly|actually|always)\s+){0,3}")
_NEGATED = re.compile(r"(?:" + _NEGATION + r"|\bno\s+)[$(\\]{0,3}\Z", re.IGNORECASE)
_NEGATED_BOX = re.compile(_NEGATION + r"(?:\$\$?|\\[(\[])?\s*\Z", re.IGNORECASE)


def _negated_box(before: str) -> bool:
    """Whether the text just before a box negates it ("the answer is not \\boxed{9}")."""
    lower = before.lower()  # a plain box pays no regex search: the words are looked for first
    return any(word in lower for word in ("not", "n't", "never", "but", "than", "instead")) and (
        _NEGATED_BOX.search(before) is not None)


def negated(text: str, at: int) -> bool:
    """Whether the value that starts at ``at`` in ``text`` is negated ("… is not 9")."""
    return _NEGATED.search(text[max(0, at - 60): at]) is not None


# --- the rules in order ----------------------------------------------------------------------

def committed_answer(response: str, mode: ExtractMode = "auto", think: ThinkMode = "strip",
                     markers: Sequence[Marker] = MARKERS, truncated: bool | None = None
                     ) -> Answer | NoCommitment:
    """The answer ``response`` commits to, or why it commits to none (the module's rules).

    ``truncated``: True, the completion was cut off by the length limit (the trainer
    knows): only a marked answer that closes before the cut counts, never the prose around
    the cut. False: it was not (it ended where the model stopped), so the ends-as-a-sentence
    rule, which guesses at a cut, is off. None (not said): that rule guesses."""
    text = after_thinking(response, think)
    if text is None:
        return NoCommitment(NEVER_CLOSED)
    text = without_code(text)
    answer = None
    if "answer_tag" in markers and OPEN_ANSWER in text:
        answer = _tagged(text, mode, markers)
    if answer is None:
        answer = _read(text, mode, markers, truncated)
    return answer if isinstance(answer, NoCommitment) else with_unicode_math(answer)


def _tagged(text: str, mode: ExtractMode, markers: Sequence[Marker]
            ) -> Answer | NoCommitment | None:
    """The answer of the last ``<answer>…</answer>`` span, an explicit marker as a box is
    (its close proves it was not cut); None when there is none, or a box follows it (the
    last marker wins). A box inside it is the answer; else its content, as LaTeX when it
    is short (``72``, ``$\\frac12$``, ``x = 5``), as prose math-verify reads otherwise."""
    span = answer_span(text)
    if span is False:
        return NoCommitment(ANSWER_OPEN)
    if span is None or isinstance(span, bool):
        return None
    end, content = span.end, span.content
    if "boxed" in markers and ("\\boxed" in text[end:] or "\\fbox" in text[end:]):
        return None
    if "boxed" in markers and ("\\boxed" in content or "\\fbox" in content):
        return _read(content, "boxed", markers, False)
    if mode == "boxed":
        return NoCommitment(NO_BOX)
    content = content.strip().rstrip(".").strip()
    if not content:
        return NoCommitment(NO_ANSWER)
    if len(_MATH_SPAN.sub("x", content).split()) <= 4:
        return Answer((_as_latex(content),))
    return Answer((rewrite_prose(content),), kind="marked" if mode == "marked" else "text")


def _read(text: str, mode: ExtractMode, markers: Sequence[Marker], truncated: bool | None
          ) -> Answer | NoCommitment:
    boxes, cut_off = boxes_from_end(text) if "boxed" in markers else ([], False)
    final = minerva(text) if mode != "boxed" and "final_answer" in markers else None
    if boxes and last_box_open(text, boxes):
        return NoCommitment(LAST_BOX_OPEN)
    if boxes and not (final and final[0] >= boxes[0].end):
        items = box_group(text, boxes)
        if _boxes_disagree(text, boxes, items):
            return NoCommitment(TWO_READINGS, "ok")
        if _negated_box(text[max(0, boxes[0].start - 60): boxes[0].start]):
            return NoCommitment(NEGATED_BOX, "ok")
        wide = box_group(text, boxes, wide=True)
        return Answer(items, wide=wide if wide != items else None)
    if final is not None:
        return Answer((final[2],)) if final[2] else NoCommitment(NO_ANSWER)
    if mode == "boxed":
        return NoCommitment(NO_BOX)
    if cut_off:
        return NoCommitment(LAST_BOX_OPEN)
    hashes = last_hashes(text) if "hashes" in markers else None
    if hashes is not None:
        if truncated and "\n" not in text[text.rfind("####"):].rstrip(" \t"):
            return NoCommitment(TRUNCATED)  # "#### 7" at the cut may have been "#### 72"
        return Answer((hashes,))
    bold = bold_final_line(text) if "bold" in markers and "**" in text else None
    if bold is not None:
        if truncated and _OPEN_AFTER_BOLD.search(text[text.rfind("**") + 2:]):
            return NoCommitment(TRUNCATED)  # "**Final Answer:** 7" at the cut: maybe 72
        return Answer(bold)
    tail = ending(text)
    if "\\boxed" in tail or "\\fbox" in tail:  # an echoed "\boxed{}" is no answer
        tail = EMPTY_BOX.sub("", tail)
    if not tail.strip():
        return NoCommitment(NO_ANSWER)
    sentence, anchored, closed = answering_sentence(tail, cut=bool(truncated))
    # "Answer: C" ends the text and states it; "The answer is 7, because when we" was cut
    stated = anchored and (closed or len(sentence.split()) <= 4)
    if truncated and not (anchored and closed):
        return NoCommitment(TRUNCATED)
    if (mode != "marked" and truncated is None and not stated
            and not ends_complete(tail)):
        return NoCommitment(CUT_MID_SENTENCE)
    return Answer((rewrite_prose(tail).strip(),), kind="marked" if mode == "marked" else "text")


# after a bolded final line's last "**": a value still being written (not only punctuation)
_OPEN_AFTER_BOLD = re.compile(r"[^\s.!?。*]")


def _boxes_disagree(text: str, boxes: list[Span], items: tuple[str, ...]) -> bool:
    """Whether the nearest earlier box with another answer than the last group's is offered
    as an alternative to it (``two_readings``), not corrected by it."""
    group_start = boxes[0].start
    for box in boxes[1:]:
        if box.content in items:
            group_start = box.start
            continue
        between = text[box.end : group_start]
        return two_readings(between[:300] + " " + between[-300:],
                            text[max(0, box.start - 300) : box.start])
    return False
