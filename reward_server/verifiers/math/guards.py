"""Reward-hacking guards: answers math-verify reads as one value that state something else.

math-verify keeps one side of what it parses: the last right-hand side of ``3 = 4``, the
value after ``\\neq`` or ``>``, one number of "3 or maybe 4" in prose, a product of letters
for ``ACB``. Against a reference with one value, each of those would score as correct. The
functions here are pure text rules (no SymPy) that ``check`` runs before trusting a "yes".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from reward_server.text import last_match

_WORDS = r"(?:maybe|perhaps|possibly|even|else|rather)"
_VALUE = r"(?:-?\d[\d.]*|\$[^$\n]{1,60}\$|\\\([^\n]{1,60}?\\\))"
# what joins two candidates: "or", "and", "to", ";", ",", ± and logical or, "(or", ". Or"
_SPACE = r"(?:\s|\\[,;:! ]|\\q?quad\b)*"
_JOIN = (
    _SPACE + r"[.,;(]?" + _SPACE + r"(?:,\s|;|\bor\b|\band\b|\bto\b|\\pm|±|\\mp|\\lor|\\vee"
    r"|\\text\s*\{\s*\(?\s*(?:or|and)\b[^{}]{0,10}\})" + _SPACE + r"(?:" + _WORDS + r"\s*)?"
)
_NAMED = r"(?:[a-zA-Z]\s*=\s*)?"
_BEFORE = re.compile(_VALUE + _JOIN + _NAMED + r"\$?$", re.IGNORECASE)
_AFTER = re.compile(r"^\$?" + _JOIN + _NAMED + _VALUE, re.IGNORECASE)
_HEDGED = re.compile(_VALUE + r"\$?" + _JOIN + _NAMED + _VALUE, re.IGNORECASE)
# "The answer is", "answer:": the sentence that states the answer, where math-verify reads it
_ANCHOR = re.compile(r"answer\b[^\n.]{0,40}?(?:\bis\b|:)", re.IGNORECASE)
# a sentence ends at ". " or a line break, unless the next one hedges ("3. Or 4.")
_COMMAND = re.compile(r"\\[a-zA-Z]+\s*")
_MORE_MATH = re.compile(r"[^A-Za-z\d]*\d")
_SENTENCE_END = re.compile(
    r"(?:\.(?:\s|$)|\n)(?!\s*(?:or|maybe|perhaps|possibly|alternatively)\b)", re.IGNORECASE)


def offers_several(text: str, read: str) -> bool:
    """Whether the answer math-verify read from prose stands among other candidates
    ("3 or 4", "x = 3 or x = 4", "3; 4", "3 (or 4)", "3 to 4", "3 \\pm 4"): a guard for a
    reference with one answer, which math-verify would match against one of them.

    With an "answer is"/"answer:" statement, only that sentence is looked at, so a check
    that follows ("The answer is 12. Check: the divisors of 12 are 1, 2, 3, 4, 6, 12.") is
    not a list. Otherwise the last mention of the value read, and its neighbours."""
    if not read:
        return False
    anchor = last_match(_ANCHOR, text)
    if anchor is not None:
        end = _SENTENCE_END.search(text, anchor.end())
        sentence = text[anchor.end() : end.start() if end else len(text)]
        at = mentions(sentence, read)
        if at >= 0:  # more math after the value read ("3 = 4", "3 \\cdot 4"): not what it says
            rest = _COMMAND.sub(" ", sentence[at + len(read) :])
            return (_HEDGED.search(sentence) is not None or _MORE_MATH.match(rest) is not None
                    or part_of_run(sentence, at, at + len(read)))
    start = mentions(text, read)
    if start < 0:
        return False
    end = start + len(read)
    return bool(_BEFORE.search(text[max(0, start - 80) : start])
                or _AFTER.match(text[end : end + 80]) or part_of_run(text, start, end))


def stated_equation(text: str, read: str) -> str | None:
    """``3 = 4`` when the "answer is" sentence says that and math-verify read only ``4``:
    the equation to check (``2 + 2 = 4`` is a computation; ``3 = 4`` is no value)."""
    anchor = last_match(_ANCHOR, text)
    if anchor is None or not read:
        return None
    end = _SENTENCE_END.search(text, anchor.end())
    sentence = text[anchor.end() : end.start() if end else len(text)]
    at = mentions(sentence, read)
    if at < 0:
        return None
    before = sentence[:at].strip().strip("$")
    if not _EQUATED.search(before):
        return None
    return (before + read).strip()


_EQUATED = re.compile(r"\d[^A-Za-z=]*=\s*$")


def mentions(text: str, read: str) -> int:
    """Where ``read`` last stands on its own in ``text`` (not inside a longer number)."""
    start = text.rfind(read)
    while start >= 0:
        end = start + len(read)
        if (start > 0 and text[start - 1].isdigit()) or (end < len(text) and text[end].isdigit()):
            start = text.rfind(read, 0, start)
            continue
        return start
    return -1


# Numbers side by side, with only spacing between them: "7 7 7", "3 4 5", "12 34". TeX
# drops the spaces in math mode, yet no one writes 777 that way; math-verify's LaTeX parser
# reads "7 7 7" as 21 and "12 345" as 357, and a plain reading as 777. A thousands
# grouping ("12 345", "1\\,000 000": three digits in each group after the first) is one
# number; any other run is several numbers, so no one value.
_GAP = r"(?:[ \t~]|\\[,;:! ]|\\q?quad(?![a-zA-Z])|\\[hk]space\*?\s*\{[^{}\n]{0,20}\})+"
# possessive: no gap starts with a digit, so giving digits back never helps, and on a
# megabyte of digits it cost a backtracking step each (one long regex call)
_NUMERAL = r"\d++(?:\.\d++)?"
# (not "2 1/2", a mixed number, which ``numbers`` reads as 5/2, nor "\\log_2 8")
_DIGIT_RUN = re.compile(r"(?<![\d._^])" + _NUMERAL + r"(?:" + _GAP + _NUMERAL + r")+(?![\d/])")
_GROUPED = re.compile(r"\d{1,3}(?:" + _GAP + r"\d{3})+(?:\.\d+)?")


def side_by_side(text: str) -> bool:
    """Whether ``text`` sets numbers side by side with only spacing between them, other
    than as thousands groups (``7 7 7``, ``2 \\quad 3``; not ``12 345`` or ``1\\,000``)."""
    return any(not _GROUPED.fullmatch(run.group()) or _WIDE_GAP.search(run.group())
               for run in _DIGIT_RUN.finditer(text))


def join_groups(text: str) -> str:
    """``text`` with each thousands grouping written without its spacing (``1\\,000\\,000``
    as ``1000000``, which math-verify's parser would read as 1*0*0)."""
    if not any(c in text for c in " \t~\\"):
        return text
    return _DIGIT_RUN.sub(lambda m: re.sub(_GAP, "", m.group())
                          if _GROUPED.fullmatch(m.group()) and not _WIDE_GAP.search(m.group())
                          else m.group(), text)


# a gap no one writes inside a number: it sets two numbers apart
_WIDE_GAP = re.compile(r"quad|[hk]space")
# "3 \text{, } 4": a separator written as text, between two values: a list
TEXT_SEPARATOR = re.compile(r"\\(?:text|mbox|textrm|mathrm)\s*\{\s*[,;]\s*\}")


def part_of_run(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` (a number math-verify read from prose) is one of several
    numbers set side by side there, or one group of a spaced number: either way not what
    the text states (``The answer is 7 7 7`` read as 7, ``12 345`` read as 345)."""
    return any(run.start() <= start and end <= run.end() and (run.start(), run.end()) !=
               (start, end) for run in _DIGIT_RUN.finditer(text, max(0, start - 200),
                                                          min(len(text), end + 200)))


# A stated answer that hedges or disowns itself in words: "5 \text{ or six}",
# "3 \text{ (wrong)}", "5 \text{ is not the answer}", "#### 3 (or 4)"; and words that change
# the number's value ("5 \text{ thousand}", "5 \text{ thousandths}", "5 \text{ below zero}",
# "2 \text{ squared}", "4 \text{ score}"), which a unit rule would drop.
MULTIPLIER_WORDS = (
    r"thousandths?|millionths?|billionths?|trillionths?|hundredths?|tenths?"
    r"|thousands?|millions?|billions?|trillions?|hundreds?|dozens?|tens|score|grand"
    r"|lakhs?|crores?|half|halves|quarters?|thirds|twice|thrice|doubled?|tripled?"
    r"|quadrupled?|times|squared|cubed|power|factorial|negative|minus|below|plus"
)
_WORD_HEDGE = re.compile(
    r"(?<![\\\w])(?:or|maybe|perhaps|possibly|not|wrong|incorrect|either|nor|unless|except|"
    + MULTIPLIER_WORDS + r")\b",
    re.IGNORECASE,
)


def hedged_words(answer: str, reference: str) -> bool:
    """Whether a stated answer carries a hedge or multiplier word the reference lacks."""
    said = {w.lower() for w in _WORD_HEDGE.findall(answer)}
    return bool(said - {w.lower() for w in _WORD_HEDGE.findall(reference)})


# Relations, negations, implications and other operators whose one side math-verify may keep.
_RELATION = re.compile(
    r"\\(?:neq?|not|neg|lnot|le|ge|leq|geq|leqslant|geqslant|lt|gt|sim|simeq|cong"
    r"|equiv|lor|vee|land|wedge|to|rightarrow|Rightarrow|leftarrow|Leftarrow|implies|iff"
    r"|mapsto|longrightarrow|choose|cancel|sout|xcancel|bcancel|propto|mid|nmid|setminus"
    r"|oplus|otimes|in|notin|ni|cup|cap|colon|atop|gets|pmod|bmod|parallel|perp)(?![a-zA-Z])"
    r"|[<>≠≤≥→?&]|!=|(?<!\\)[!~]\s*\d|\\[%#]\s*\d|\\\\"
)
_APPROX = re.compile(r"\\approx(?![a-zA-Z])|≈")
_SUBSCRIPT = re.compile(r"_\s*(?:\{[^{}]*\}|\\?[A-Za-z0-9])")
_NAME = re.compile(r"[A-Za-z(),:'|+\-*/^!\s]+")  # letters only: "x_1 + x_2", "|AB|", "f(x)"


def relation_for_value(answer: str) -> str | None:
    """Why ``answer`` is not one value (reason), or None when it is. For a reference that is a
    plain value: ``3 = 4``, ``x = 3 = 4``, ``2+2=5``, ``\\neq 3``, ``> 3``, ``3 \\lor 4``,
    ``3 \\\\ 4``, ``3 \\to 4``, ``\\cancel{3} 4``. ``x = 3`` (one ``=`` after a name: no
    digit outside subscripts, as in ``x_1 + x_2 = 5``) is an assignment and stays a value, as
    math-verify reads it."""
    plain = answer
    if "\\begin" in plain:  # matrices and arrays: "\\" and "&" separate their cells
        plain = plain.replace("\\\\", " ").replace("&", " ")
    if _RELATION.search(plain) or (plain.count("|") - plain.count("\\|")) % 2:
        return "a relation or operator, not a value"  # one "|" (3 | 4); |x| has two
    sides = _APPROX.sub("=", plain).split("=")  # "x \\approx 11" names a value as "=" does
    if len(sides) > 2:
        return "a chain of equations, not a value"
    if len(sides) == 2:
        name = _COMMAND.sub("", _SUBSCRIPT.sub("", sides[0])).replace("{", "").replace("}", "")
        if not sides[0].strip() or not _NAME.fullmatch(name or "x"):
            return "an equation between values, not a value"
    return None


_ORDERED_PREFIX = re.compile(r"\\(?:angle|measuredangle|triangle|overline|overarc|arc|widehat)\s*")
_TEXT_COMMAND = re.compile(r"\\(?:text|mathrm|textrm|textbf|mathbf|textit|mathit)\s*")
_LETTERS = re.compile(r"[A-Za-z]+")


def letter_sequence(text: str) -> str | None:
    """``ABC``, ``\\angle BAC``, ``silent``: names whose order matters (points, words), as
    the letters in order (an angle or segment as the lesser of both directions: ``\\angle
    ABC`` = ``\\angle CBA``); None for anything else. Two lower-case letters (``ab``) stay an
    algebraic product, which math-verify compares."""
    body = re.sub(r"[{}\s]", "", _TEXT_COMMAND.sub("", _ORDERED_PREFIX.sub("", text)))
    if not _LETTERS.fullmatch(body) or len(body) < 2:
        return None
    if _ORDERED_PREFIX.search(text):  # an angle or segment read backwards is itself
        return min(body, body[::-1])
    if body.isupper() or len(body) >= 4:
        return body
    return None


# Multiple choice. A reference that is one option letter: "C", "(C)", "\text{(C)}".
_CHOICE_GOLD = re.compile(r"\s*(?:\\(?:text|textbf|mathrm|mathbf)\s*\{)?\s*\(?([A-E])\)?\s*\}?\s*")
# A stated answer that opens with a parenthesised option ("\textbf{(C)}\ 12", "(C) 12") or
# "C. 12" / "C: 12"; a bare "C + 1" is an expression, not an option.
_CHOICE_STATED = re.compile(
    r"\s*(?:\\(?:text|textbf|mathrm|mathbf)\s*\{)?\s*(?:\(([A-E])\)|([A-E])[.:](?:\s|\\ |$))")
# Prose: "The answer is (C).", "**Answer: (C)**", "Answer: C", "The correct option is C."
_CHOICE_PROSE = re.compile(
    r"(?:answer|option|choice)(?:\s+is)?\s*:?\s*\**\s*\(?([A-E])\)?(?![A-Za-z0-9])",
    re.IGNORECASE)


def choice_verdict(answer: str, prose: bool, reference: str) -> bool | None:
    """Against a reference that is one option letter: whether ``answer`` names it, or None
    when this rule does not apply (the reference is no option letter, or the answer names
    none in these forms)."""
    gold = _CHOICE_GOLD.fullmatch(reference)
    if gold is None:
        return None
    text = answer[-2000:] if prose else answer
    if prose:
        found = last_match(_CHOICE_PROSE, text)
        if found and not found.group(1).isupper():
            found = None
    else:
        found = _CHOICE_STATED.match(text)
    if found is None:
        return None
    rest = text[found.end() : found.end() + 200]
    end = _SENTENCE_END.search(rest) if prose else None
    if _OTHER_OPTION.search(rest[: end.start()] if end else rest):
        return False  # "(A) or (C)", "(A), (B), (C)": several options for one
    return next(letter for letter in found.groups() if letter) == gold.group(1)


_OTHER_OPTION = re.compile(r"\([A-E]\)|(?<![A-Za-z\\])[A-E](?![A-Za-z])")


_LETTER_LIST = re.compile(r"[A-Z](?:\s*(?:,|\\,|and|\\text\{\s*(?:,|and)\s*\})\s*[A-Z])+")


def option_set_verdict(answer: str, reference: str) -> bool | None:
    """Against a reference that lists option letters (``\\text{A, B, D}``): whether the
    answer lists the same ones in any order (``A, B, D``, ``\\text{D, A, B}``); None when
    either side is no such list."""
    letters = []
    for text in (reference, answer):
        body = _TEXT_COMMAND.sub("", text).replace("{", "").replace("}", "").strip()
        if not _LETTER_LIST.fullmatch(body):
            return None
        letters.append(re.findall(r"(?<![A-Za-z])[A-Z](?![A-Za-z])", body))
    gold, mine = letters
    return sorted(set(gold)) == sorted(mine)  # a repeated letter is no second option


# "9 + 50", "3 \times 4", "1/2 + 1/3": literal numbers joined by arithmetic operators, the
# computation written out and not done. A lone fraction ("3/4") is a value.
_LITERAL = r"\(?\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:\s*/\s*\d+)?\s*\)?"
_OPERATOR = r"\s*(?:[-+*×·÷]|\\times|\\cdot|\\div)(?![a-zA-Z])\s*"
_UNDONE = re.compile(r"(?:[a-zA-Z]\s*=\s*)?" + _LITERAL + r"(?:" + _OPERATOR + _LITERAL + r")+")
_DELIMITERS = re.compile(r"\\[()\[\]]|\$|\\[,;:! ]|[{}]")


def undone_arithmetic(answer: str) -> bool:
    """Whether ``answer`` is arithmetic on literal numbers left undone (``9 + 50``), which
    math-verify evaluates and scores as its value. A model that restates the question
    ("To convert 9 + 50 to a number, ...") is then paid for the sum it never computed; the
    demo's SmolLM2 learned exactly that in 14 steps. A stated answer is its value."""
    return _UNDONE.fullmatch(_DELIMITERS.sub("", answer).strip()) is not None


# What may stand before a stated number: a name ("x =", "a_1 ="), math delimiters, \left(.
_NAME_PREFIX = re.compile(r"^\s*(?:[A-Za-z](?:_\{?\w+\}?)?\s*=\s*)+")
_WRAPPERS = re.compile(r"\\(?:left|right|displaystyle|textstyle|dfrac|tfrac)(?![a-zA-Z])|\$")
_TEN_POWER = re.compile(
    r"(?:-?\d+(?:\.\d+)?\s*(?:\\times|\\cdot|\*|×)\s*)?10\s*\^\s*\{?\s*-?\d+\s*\}?")


_LAST_SIDE = re.compile(r"=|\\approx(?![a-zA-Z])|≈")


def stated_part(written: str) -> str:
    """The value part of a stated answer: ``x = 5`` -> ``5``; ``x = 5+6 = 11`` -> ``11`` (a
    chain's truth is the relation guards' to judge); ``\\left(59\\right)`` -> ``(59)``."""
    return _LAST_SIDE.split(_NAME_PREFIX.sub("", _WRAPPERS.sub("", written)))[-1].strip()


# An operation on numbers: an operator, a power, a factorial, a function, a product by
# juxtaposition ("2(16-3-4)", "(3+4)(12)"), a fraction of anything but two digit strings.
_OPERATION = re.compile(
    r"(?<=[\d)}\s])[-+*/^!×·÷]|\^|!|\\(?:times|cdot|div|sqrt|binom|dbinom|tbinom|choose|log|ln"
    r"|lg|exp|sin|cos|tan|max|min|gcd|operatorname|sum|prod|lfloor|lceil)(?![a-zA-Z])"
    r"|[\d)]\s*\(|\)\s*\d|\\frac\s*\{[^{}]*[^\d\s{}][^{}]*\}")


def computation(text: str) -> bool:
    """Whether ``text`` writes an operation on its numbers, not only a number."""
    return _OPERATION.search(text) is not None


def power_of_ten(text: str) -> bool:
    """``10^{6}``, ``1.5\\times10^{3}``: a number in scientific notation, a value."""
    return _TEN_POWER.fullmatch(text.replace(" ", "")) is not None


# The question's math: $…$, $$…$$, \(…\), \[…\] (``_SpanScan``); each side of its relations.
_SIDES = re.compile(r"=|\\(?:le|ge|leq|geq|neq|approx)(?![a-zA-Z])|[<>]|,")
_PLAIN = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)|[A-Za-z]")
_LAYOUT = re.compile(r"\s+|\\[,;:! ]|\\(?:left|right|displaystyle|textstyle)(?![a-zA-Z])")
_FRAC_NAME = re.compile(r"\\[dt]frac(?![a-zA-Z])")


def without_layout(text: str) -> str:
    """``text`` without what only typesets it: spacing, ``\\left``/``\\right``,
    ``\\displaystyle``; ``\\dfrac`` and ``\\tfrac`` as ``\\frac``. Two answers equal here
    are the same LaTeX (``numbers.same_text``); a copied question reads the same here."""
    return _FRAC_NAME.sub(r"\\frac", _LAYOUT.sub("", text))


class _SpanScan:
    """The question's math spans, leftmost first, each closed by the first closer after it:
    ``$$…$$``, else ``$…$`` (neither ``$`` escaped), ``\\(…\\)``, ``\\[…\\]``, each with
    some content. That is a lazy regex's reading (the tests hold the two to each other),
    in linear time: the regex tried each opener against the whole rest of the text when
    nothing closed it, so 100,000 characters of ``\\(`` cost 37 s. Here each closer is
    searched for with ``str.find``, and a search that finds none is remembered: no later
    opener of that kind can close either."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.none_after: dict[str, int] = {}  # closer -> no closer starts at or after this

    def _closer(self, closer: str, at: int) -> int:
        """The first ``closer`` at or after ``at`` (unescaped, for ``$``), or -1."""
        if at >= self.none_after.get(closer, len(self.text) + 1):
            return -1
        text, found = self.text, self.text.find(closer, at)
        while closer == "$" and found > 0 and text[found - 1] == "\\":
            found = text.find("$", found + 1)
        if found < 0:
            self.none_after[closer] = at
        return found

    def spans(self) -> Iterator[str]:
        text, at = self.text, 0
        following = {opener: -2 for opener in ("$", "\\(", "\\[")}  # next one, from at
        while True:
            for opener, i in following.items():
                if -1 < i < at or i == -2:
                    following[opener] = text.find(opener, at)
            starts = [i for i in following.values() if i >= 0]
            if not starts:
                return
            start = min(starts)
            end = self._span_end(start)
            if end is None:
                at = start + 1
                for opener, closer in (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
                    if closer in self.none_after:  # no later opener of the kind closes
                        following[opener] = -1
                continue
            yield text[start + end[0] : end[1]]
            at = end[2]

    def _span_end(self, start: int) -> tuple[int, int, int] | None:
        """(content offset, content end, span end) of the span that opens at ``start``,
        trying ``$$…$$`` before ``$…$``; None when none opens there."""
        text = self.text
        if text.startswith("$$", start):
            close = self._closer("$$", start + 3)
            if close >= 0:
                return 2, close, close + 2
        if text[start] == "$":
            if start > 0 and text[start - 1] == "\\":
                return None
            close = self._closer("$", start + 2)
            return (1, close, close + 1) if close >= 0 else None
        closer = "\\)" if text[start + 1] == "(" else "\\]"
        close = self._closer(closer, start + 3)
        return (2, close, close + 2) if close >= 0 else None


_CACHED_QUESTION_CHARS = 32_768  # longer ones are read again per item (linear, on a thread)


def question_pieces(question: str) -> frozenset[str]:
    """The question's math, as it would be copied: each span whole, and each side of its
    relations and lists, without layout. Cached: a group's G items share one question. Not
    a question near the 100,000-character limit: 15,000 spans hold 1.4 MB, so 1,024 such
    questions in the cache would keep 1.5 GB in the server process."""
    if len(question) > _CACHED_QUESTION_CHARS:
        return _question_pieces(question)
    return _cached_question_pieces(question)


def _question_pieces(question: str) -> frozenset[str]:
    pieces: set[str] = set()
    for span in set(_SpanScan(question).spans()):
        pieces.add(without_layout(span))
        pieces.update(without_layout(side) for side in _SIDES.split(span))
    return frozenset(pieces - {""})


_cached_question_pieces = lru_cache(maxsize=1024)(_question_pieces)


def restates_question(answer: str, question: str, reference: str) -> bool:
    """Whether ``answer`` is one of the question's own expressions copied (``\\\\sqrt{50}``
    for "Simplify $\\\\sqrt{50}$", ``(x+2)(x-3)`` for "Expand $(x+2)(x-3)$", ``x + 9 = 14``
    for "Solve $x + 9 = 14$"): math-verify finds it equal to the answer, which it is, but it
    is the question. A number or a single letter is never a restatement (questions name
    numbers and options), nor is the reference as written."""
    mine = without_layout(answer)
    if not mine or _PLAIN.fullmatch(mine) or mine == without_layout(reference):
        return False
    pieces = question_pieces(question)
    value = without_layout(stated_part(answer))  # "x = (x+2)(x-3)": the copied side
    return mine in pieces or (value in pieces and not _PLAIN.fullmatch(value))
