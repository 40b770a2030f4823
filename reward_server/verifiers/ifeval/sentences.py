"""Sentences and word tokens without NLTK's data: an offline stand-in for punkt.

IFEval counts sentences with NLTK's punkt model and all-capital words with
``nltk.word_tokenize`` (punkt, then the Treebank rules), and both need the ``punkt_tab``
data that NLTK downloads from the internet. This module decides the same things from rules
that mirror what punkt's English model does (Kiss & Strunk 2006, as NLTK implements it):

* a sentence ends at ``?`` or ``!``, or at a final ``.`` after a word that is not an
  abbreviation, when whitespace and another token follow (closing quotes and brackets may
  stand between); a newline alone ends nothing;
* after an abbreviation (``Mr.``, ``U.S.``), an initial (``J.``) or an ellipsis (``...``),
  only when the next word is a capitalised common word (``The``, ``It``): punkt's
  orthographic heuristic, read from a word list instead of corpus counts;
* after a number (``2019.``, ``1.``), unless the next word starts in lower case.

Like punkt's English model, ``e.g.``, ``i.e.`` and ``etc.`` are no abbreviations (WSJ text
has none), so they end a sentence.
tests/reward_server/verifiers/ifeval/test_ifeval_reference.py measures where this disagrees
with punkt itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# A subset of punkt's English abbreviations (the common ones): titles, months, days,
# company suffixes, states, and dotted ones. Lowercase, without the final period.
ABBREVIATIONS = frozenset("""
mr mrs ms messrs dr prof gen col lt maj adm sen rep reps jr sr st ave
jan feb aug sep sept oct nov dec tues wed fri inc ltd co corp cos bros vs ft mg yr
ala ariz calif colo conn fla ga ill kan ky mich minn nev okla ore pa tenn va vt wash wis
u.s u.s.a u.k u.n u.s.s.r a.m p.m ph.d d.c n.y l.a m.b.a
""".split())
# Initials that punkt's model lists as abbreviations: never a sentence end ("Vitamin C. It")
LISTED_INITIALS = frozenset("cdefghklmnprstvw")
# Capitalised after an initial, these start a sentence: punkt's orthographic heuristic says
# so of a word its model saw in lower case and never capitalised inside a sentence (most
# common words were, in headlines: "The", "It" are not among them).
ORTHOGRAPHIC_STARTERS = frozenset("""
so yet though thus nor indeed instead moreover nevertheless nonetheless similarly finally
which such still yes please note thank thanks here her your
""".split())
# After an abbreviation or an ellipsis, these too (punkt's list of frequent sentence starters).
SENTENCE_STARTERS = ORTHOGRAPHIC_STARTERS | frozenset("""
according although among both but despite even he however i if in it many meanwhile most
separately since some the there these they this under when while
""".split())
# punkt's "non-word" characters: after a final period, ? or !, one of them marks a possible
# sentence end as whitespace does ("them.**", '45?"')
_NON_WORD = ")\";}]*:@'({[!?"
# a possible sentence end: each match is one position, so the scan is linear in the text
_CANDIDATE = re.compile(r"[.?!](?=([" + re.escape(_NON_WORD) + r"])|\s+(\S+))")
_SPACE = re.compile(r"\s")
_WORD_START = re.compile(r"['!?]?[^\s" + re.escape(_NON_WORD) + r"]*\Z")
_REALIGN = re.compile(r"[\"')\]}]+?(?:\s+|(?=--)|$)", re.MULTILINE)
_NUMBER = re.compile(r"-?[.,]?\d[\d,.\-]*")
_INITIAL = re.compile(r"[^\W\d]")
_LONGEST_WORD = 64  # no abbreviation, initial or number that decides anything is longer


def _next_kind(token: str) -> str:
    """How the token after a period reads: 'lower' (no sentence starts with it), 'starter'
    (an orthographic starter), 'listed' (a frequent starter), or 'other'."""
    if token[0] in ";:,.!?" or token[0].islower():
        return "lower"
    if not token[0].isupper():
        return "other"
    word = token[:_LONGEST_WORD].rstrip(".,;:!?" + _NON_WORD).lower()
    if word in ORTHOGRAPHIC_STARTERS:
        return "starter"
    return "listed" if word in SENTENCE_STARTERS else "other"


def _ends_sentence(window: str, next_token: str) -> bool:
    """Whether a sentence ends after ``window`` (the end of a chunk, up to its final ``.``,
    ``?`` or ``!``) when ``next_token`` follows, as punkt's two passes decide."""
    core = window.rstrip(".")
    if window[-1] != "." or (core and core[-1] in "?!"):
        return True
    kind = _next_kind(next_token)
    if len(window) - len(core) > 1:  # an ellipsis
        return kind in ("starter", "listed")
    found = _WORD_START.search(core[-_LONGEST_WORD:])
    word = (found.group() if found else "").lstrip("-,&#`")
    if len(word) >= _LONGEST_WORD:
        return True
    lowered = word.lower()
    if _INITIAL.fullmatch(word):  # a proper name after it ("J. Smith") continues
        return lowered not in LISTED_INITIALS and kind in ("starter", "listed")
    if lowered in ABBREVIATIONS or ("-" in lowered and lowered.rsplit("-", 1)[1] in ABBREVIATIONS):
        return kind in ("starter", "listed")
    if _NUMBER.fullmatch(word):
        return kind != "lower"
    return True


def _breaks(text: str) -> Iterator[tuple[int, int]]:
    """``(end, next_start)`` of each sentence boundary. Of the possible ends in one chunk
    only the last counts (punkt's ``\\S*[.?!]`` is greedy); closing quotes and brackets
    after an end belong to the sentence before (punkt's realignment), and a sentence they
    would leave empty is none."""
    last = len(text.rstrip())
    pending = None
    for m in _CANDIDATE.finditer(text):
        if pending is not None and (pending.group(2) is not None or _SPACE.search(
                text, pending.end(), m.start()) is not None):
            yield from _boundary(text, pending, last)
        pending = m
    if pending is not None:
        yield from _boundary(text, pending, last)


def _boundary(text: str, m: re.Match[str], last: int) -> Iterator[tuple[int, int]]:
    window = text[max(0, m.end() - _LONGEST_WORD - 2):m.end()]
    if not _ends_sentence(window, m.group(1) or m.group(2)):
        return
    end, next_start = m.end(), (m.end() if m.group(1) else m.start(2))
    if (closing := _REALIGN.match(text, next_start)) is not None:
        end, next_start = next_start + len(closing.group().rstrip()), closing.end()
    if next_start < last:
        yield end, next_start


def split_sentences(text: str) -> list[str]:
    """``text`` cut into sentences (none for blank text)."""
    if not text.strip():
        return []
    sentences, start = [], 0
    for end, next_start in _breaks(text):
        sentences.append(text[start:end].strip())
        start = next_start
    sentences.append(text[start:].strip())
    return sentences


def count_sentences(text: str) -> int:
    if not text.strip():
        return 0
    return 1 + sum(1 for _ in _breaks(text))


# NLTK's NLTKWordTokenizer (the Treebank rules ``word_tokenize`` applies to each sentence),
# as far as they decide which tokens are all capitals: the splits, the clitics (DON'T is DO
# and N'T, NASA's is NASA and 's), "cannot" as two words. Each rule is one linear pass over
# the whole text; only a sentence's final period is found sentence by sentence.
_SPLITS = [
    (re.compile(r"([«“‘„»”’]|`+)"), r" \1 "),
    (re.compile(r"(?i)(?<!\w)(')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)"), r"\1 "),
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),
    (re.compile(r"([:,])$"), r" \1 "),
    (re.compile(r"\.{2,}"), r" \g<0> "),
    (re.compile(r"[;@#$%&\u2012-\u2015?!*\[\]()\{\}<>\"]|--"), r" \g<0> "),
    (re.compile(r"([^'])' "), r"\1 ' "),
]
_FINAL_PERIOD = re.compile(r"[^.](\.)[\]\)}>\"']*\s*\Z")
_CLITICS = [
    re.compile(r"([^' ])('[sS]|'[mM]|'[dD]|') "),
    re.compile(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "),
]
_CONTRACTIONS = [re.compile(p) for p in (
    r"(?i)\b(can)(not)\b", r"(?i)\b(d)('ye)\b", r"(?i)\b(gim)(me)\b", r"(?i)\b(gon)(na)\b",
    r"(?i)\b(got)(ta)\b", r"(?i)\b(lem)(me)\b", r"(?i)\b(more)('n)\b", r"(?i)\b(wan)(na)(?=\s)",
    r"(?i) ('t)(is)\b", r"(?i) ('t)(was)\b")]
_SPACES = re.compile(r"\s+")


def _with_final_periods_apart(text: str) -> str:
    """``text`` with a space at each sentence boundary and before each sentence's final
    period (the Treebank rule that lets "DON'T." lose its period, then its clitic)."""
    pieces, start = [], 0
    for end, next_start in [*_breaks(text), (len(text), len(text))]:
        sentence = text[start:end]
        final = _FINAL_PERIOD.search(sentence[-_LONGEST_WORD:])
        if final is not None:
            cut = len(sentence) - len(sentence[-_LONGEST_WORD:]) + final.start(1)
            sentence = sentence[:cut] + " " + sentence[cut:]
        pieces.append(sentence)
        start = next_start
    return " ".join(pieces)


def word_tokens(text: str) -> list[str]:
    """Tokens as ``nltk.word_tokenize`` cuts them, where it matters for letter case."""
    text = _with_final_periods_apart(text)
    for pattern, repl in _SPLITS:
        text = pattern.sub(repl, text)
    text = " " + _SPACES.sub(" ", text) + " "
    for pattern in _CLITICS:
        text = pattern.sub(r"\1 \2 ", text)
    for pattern in _CONTRACTIONS:
        text = pattern.sub(r" \1 \2 ", text)
    return text.split()
