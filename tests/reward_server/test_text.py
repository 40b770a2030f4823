"""``reward_server.text``'s answer markers, as tables: each verifier's reading of a box, an
``<answer>`` span and an "Answer:" line where they differ; seeded fuzz against the simple
(quadratic) scans they stand for; and hostile text at the field limit, bounded by this
process's CPU time (the machine's load must not decide a test)."""

from __future__ import annotations

import random
import re
import time

import pytest

from reward_server.text import (
    BOX_COMMANDS,
    Span,
    boxes_from_end,
    last_answer_line,
    last_answer_tag,
    last_box,
    last_match,
)
from reward_server.worst_case import FIELD_BYTES

BOXED = ("\\boxed",)


@pytest.mark.parametrize(("text", "boxes", "cut_off"), [
    ("So \\boxed{42}.", [(3, 13, "42")], False),
    ("\\boxed{1}, \\boxed{2}", [(11, 20, "2"), (0, 9, "1")], False),
    ("\\boxed{\\boxed{1} 2}", [(0, 19, "1 2")], False),  # a box in a box is the outer's
    ("\\boxed{\\{1\\}}", [(0, 13, "\\{1\\}")], False),  # TeX: an escaped brace is text
    ("\\boxed  {3}", [(0, 11, "3")], False),  # spaces before the brace
    ("\\boxed 5 apples", [(0, 8, "5")], False),  # TeX's next token
    ("\\fbox{7}", [(0, 8, "7")], False),
    ("\\boxed{} then \\boxed{ 4 }", [(14, 25, "4")], False),  # an empty box is skipped
    ("\\boxed{1} then \\boxed{2", [(0, 9, "1")], True),  # the last one was cut off
    ("\\boxed", [], True),
    ("no box", [], False),
])
def test_boxes_from_end_is_the_math_reading(text: str, boxes: list[tuple[int, int, str]],
                                            cut_off: bool) -> None:
    found, cut = boxes_from_end(text)
    assert ([(b.start, b.end, b.content) for b in found], cut) == (boxes, cut_off)


@pytest.mark.parametrize(("text", "commands", "closed_only", "box"), [
    ("So \\boxed{42}.", BOX_COMMANDS, False, Span(3, 13, "42")),
    ("\\fbox{7}", BOX_COMMANDS, False, Span(0, 8, "7")),
    ("\\fbox{7}", BOXED, True, None),  # reasoning-gym reads \boxed only
    ("\\boxed{ }", BOX_COMMANDS, False, Span(0, 9, " ")),  # the content as written
    ("\\boxed{1 \\boxed{2}}", BOX_COMMANDS, False, Span(9, 18, "2")),  # the inner box is last
    ("\\boxed{\\frac{1}{2}}", BOXED, True, Span(0, 19, "\\frac{1}{2}")),
    ("\\boxed{a \\{ b}", BOX_COMMANDS, False, False),  # every brace counts: never closes
    ("\\boxed{a \\{ b}}", BOX_COMMANDS, False, Span(0, 15, "a \\{ b}")),
    ("\\boxed {3}", BOX_COMMANDS, False, None),  # the brace must follow the command
    ("\\boxed{1} then \\boxed{2", BOX_COMMANDS, False, False),  # the format rule: cut off
    ("\\boxed{1} then \\boxed{2", BOXED, True, Span(0, 9, "1")),  # reasoning-gym: the 1
    ("\\boxed{1} \\boxed{2 \\boxed{3", BOXED, True, Span(0, 9, "1")),
    ("\\boxed{{1}", BOXED, True, None),
    ("no box", BOX_COMMANDS, False, None),
])
def test_last_box_in_each_reading(text: str, commands: tuple[str, ...], closed_only: bool,
                                  box: Span | None | bool) -> None:
    assert last_box(text, commands, closed_only=closed_only) == box


@pytest.mark.parametrize(("text", "last", "lazy"), [
    ("<answer>1</answer> <answer> 42 </answer>", " 42 ", " 42 "),
    ("<answer>1<answer>2</answer>", "2", "1<answer>2"),  # the regex's span runs from the 1
    ("<answer>x</answer></answer>", "x</answer>", "x"),  # the regex's ends at the first close
    ("<answer>1</answer> <answer>2", "1", "1"),  # an open one after the last span
    ("<answer>\n42\n</answer>", "\n42\n", "\n42\n"),
    ("<answer>42", None, None),
    ("42</answer>", None, None),
    ("</answer><answer>", None, None),
    ("", None, None),
])
def test_last_answer_tag_in_each_reading(text: str, last: str | None, lazy: str | None) -> None:
    for reading, content in ((False, last), (True, lazy)):
        span = last_answer_tag(text, lazy=reading)
        assert (None if span is None else span.content) == content, reading
        if span is not None:
            assert text[span.start:span.end] == f"<answer>{content}</answer>"


@pytest.mark.parametrize(("text", "line"), [
    ("Work.\nAnswer: 42", "42"),
    ("Work.\n**Final Answer:** 42\n", "42"),
    ("answer: 1\nANSWER: 2", "2"),
    ("> answer： 3", "3"),
    ("The answer: 42", None),  # a label opens its line
    ("Answer:   \n", None),  # and something follows it
])
def test_last_answer_line(text: str, line: str | None) -> None:
    found = last_answer_line(text)
    assert (None if found is None else found.content) == line


@pytest.mark.parametrize(("pattern", "text", "pos", "last"), [
    (r"\d+", "1 22 333", 0, "333"),
    (r"\d+", "1 22 333", 6, "33"),
    (r"a+", "aaaa", 0, "aaaa"),  # finditer's matches, not the rightmost possible one
    (r"\d", "none", 0, None),
])
def test_last_match_is_finditers_last(pattern: str, text: str, pos: int, last: str | None
                                      ) -> None:
    found = last_match(re.compile(pattern), text, pos)
    assert (None if found is None else found.group()) == last


# --- the scans read what the simple scans read ---------------------------------------------

def reference_last_box(text: str, commands: tuple[str, ...], closed_only: bool
                       ) -> Span | None | bool:
    """Every box from the last back, braces counted forward to the end of the text."""
    starts = sorted(((m.start(), len(c) + 1) for c in commands
                     for m in re.finditer(re.escape(c + "{"), text)), reverse=True)
    for start, length in starts:
        depth = 0
        for k in range(start + length - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            if depth == 0:
                return Span(start, k + 1, text[start + length:k])
        if not closed_only:
            return False
    return None


def reference_lazy_tag(text: str) -> str | None:
    spans = re.findall(r"<answer>(.*?)</answer>", text, re.S)
    return spans[-1] if spans else None


_TOKENS = ["\\boxed{", "\\fbox{", "\\boxed", "{", "}", "\\{", "\\}", "x", " ", "<answer>",
           "</answer>", "\n"]


@pytest.mark.parametrize("seed", range(3))
def test_the_linear_scans_read_what_the_simple_ones_read(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(3000):
        text = "".join(rng.choice(_TOKENS) for _ in range(rng.randint(0, 24)))
        for commands in (BOX_COMMANDS, BOXED):
            for closed_only in (False, True):
                assert last_box(text, commands, closed_only=closed_only) == \
                    reference_last_box(text, commands, closed_only), text
        span = last_answer_tag(text, lazy=True)
        assert (None if span is None else span.content) == reference_lazy_tag(text), text


# --- hostile text: linear, and the verdicts right -----------------------------------------

BOUND_S = 2.0  # each shape costs under 0.3 s of CPU; a quadratic scan minutes
MILLION = 1_000_000
HOSTILE = {
    "a million unclosed braces": "\\boxed{" + "{" * MILLION,
    "a million closing braces": "\\boxed{" + "}" * MILLION,
    "deep nesting": "\\boxed{" * (FIELD_BYTES // 14) + "x" + "}" * (FIELD_BYTES // 14),
    "a closed box, then unclosed ones": "\\boxed{1}" + "\\boxed{" * (FIELD_BYTES // 7 - 2),
    "unclosed boxes": "\\boxed{" * (FIELD_BYTES // 7),
    "unclosed boxes of both commands": "\\fbox{\\boxed{" * (FIELD_BYTES // 13),
    "brace pairs": "\\boxed{" + "{}" * (FIELD_BYTES // 2),
    "escaped braces": "\\boxed{" + "\\{" * (FIELD_BYTES // 2),
    "boxes over brace runs": ("\\boxed{" + "{" * 50) * (FIELD_BYTES // 57),
    "open answer tags": "<answer>" * (FIELD_BYTES // 8),
    "answer tag pairs": "<answer>x</answer>" * (FIELD_BYTES // 18),
    "closing answer tags": "</answer>" * (FIELD_BYTES // 9),
    "answer labels": ("*" * 1000 + " answer\n") * (FIELD_BYTES // 1008),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_every_marker_scan_is_bounded_on_hostile_text(name: str) -> None:
    text = HOSTILE[name]
    scans = [lambda: boxes_from_end(text), lambda: last_box(text),
             lambda: last_box(text, BOXED, closed_only=True),
             lambda: last_answer_tag(text), lambda: last_answer_tag(text, lazy=True),
             lambda: last_answer_line(text)]
    for scan in scans:
        started = time.process_time()
        scan()
        assert time.process_time() - started < BOUND_S, name


def test_hostile_boxes_read_as_the_simple_scans_would() -> None:
    unclosed = HOSTILE["a million unclosed braces"]
    assert boxes_from_end(unclosed) == ([], True)
    assert last_box(unclosed) is False
    assert last_box(unclosed, BOXED, closed_only=True) is None
    deep = HOSTILE["deep nesting"]
    found, cut_off = boxes_from_end(deep)  # the 16th box from the end, 8 boxes in it unboxed
    assert ([b.content for b in found], cut_off) == (["\\boxed{" * 7 + "x" + "}" * 7], False)
    assert last_box(deep) == Span(deep.rindex("\\boxed{"), deep.index("}") + 1, "x")
    assert last_box(HOSTILE["a closed box, then unclosed ones"], BOXED, closed_only=True) == \
        Span(0, 9, "1")
    assert last_answer_tag(HOSTILE["open answer tags"], lazy=True) is None
    assert last_answer_tag(HOSTILE["open answer tags"]) is None
