"""The server process's text scans, unit by unit: linear on worst-case text, and reading
exactly what the simple (slower) scans they replace read.

The references here are the earlier implementations: a forward brace match per box, the
lazy regex for a question's math spans, a loop over a code response's lines. Seeded fuzz
holds the fast scans to them; the timing tests hold the fast scans to the field limit."""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time

import pytest

from reward_server import braces
from reward_server import text as fast
from reward_server.settings import Settings
from reward_server.verifiers.code.extract import extract_code
from reward_server.verifiers.math import INLINE_TRIAGE_CHARS, MathItem, MathVerifier
from reward_server.verifiers.math.extract import extract_answer
from reward_server.verifiers.math.guards import _cached_question_pieces, _SpanScan, question_pieces
from reward_server.worst_case import FIELD_BYTES, math_cases, reference_cases

# --- references: what the scans read before they were linear ----------------------------

_BRACE_TOKENS = re.compile(r"\\.|[{}]", re.S)


def match_brace(text: str, open_index: int) -> int | None:
    depth = 0
    for m in _BRACE_TOKENS.finditer(text, open_index):
        if m.group() == "{":
            depth += 1
        elif m.group() == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return None


def reference_unbox(content: str) -> str:
    for _ in range(fast.MAX_BOXES):
        start, command = max((content.rfind(cmd), cmd) for cmd in fast.BOX_COMMANDS)
        if start < 0:
            break
        i = start + len(command)
        while i < len(content) and content[i] == " ":
            i += 1
        close = match_brace(content, i) if content[i : i + 1] == "{" else None
        if close is None:
            break
        content = content[:start] + content[i + 1 : close] + content[close + 1 :]
    return content


def reference_boxes(text: str) -> tuple[list[tuple[int, int, str]], bool]:
    found: list[tuple[int, int, str]] = []
    cut_off = False
    end = len(text)
    for _ in range(fast.MAX_BOXES * 2):
        if len(found) >= fast.MAX_BOXES:
            break
        start, command = max((text.rfind(cmd, 0, end), cmd) for cmd in fast.BOX_COMMANDS)
        if start < 0:
            break
        i = start + len(command)
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            close = match_brace(text, i)
            if close is None:
                cut_off = True
            else:
                while found and found[-1][0] < close:
                    found.pop()
                content = reference_unbox(text[i + 1 : close]).strip()
                if content:
                    found.append((start, close + 1, content))
        elif command == "\\boxed" and i > start + len(command):
            token = re.match(r"[^\s$]+", text[i : i + 200])
            if token:
                found.append((start, i + token.end(), token.group(0)))
        else:
            cut_off = True
        end = start
    return found, cut_off


_SPANS = re.compile(r"\$\$(.+?)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.S)


def reference_spans(text: str) -> list[str]:
    return [next(g for g in m.groups() if g is not None) for m in _SPANS.finditer(text)]


def reference_code(response: str) -> str:
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in response.split("\n"):
        stripped = line.strip()
        if current is None:
            if stripped.startswith("```"):
                current = []
        elif stripped == "```":
            blocks.append(current)
            current = None
        else:
            current.append(line)
    if current is not None:
        blocks.append(current)
    return "\n".join(blocks[-1]).strip("\n") if blocks else response.strip("\n")


def _random_texts(tokens: list[str], count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(tokens) for _ in range(rng.randint(0, 30)))
            for _ in range(count)]


# --- the fast scans read what the references read ----------------------------------------

_BOX_TOKENS = ["\\boxed{", "\\boxed ", "\\boxed", "\\fbox{", "\\fbox", "{", "}", "\\{", "\\}",
               "$", "1", "2", " ", ",", "and", "\n", "x", "\\frac{", "#### ",
               "final answer is $"]


@pytest.mark.parametrize("seed", range(4))
def test_boxes_are_those_a_match_per_box_finds(seed: int) -> None:
    for text in _random_texts(_BOX_TOKENS, 5000, seed):
        boxes, cut_off = fast.boxes_from_end(text)
        assert ([(b.start, b.end, b.content) for b in boxes], cut_off) == \
            reference_boxes(text), text


@pytest.mark.parametrize("seed", range(2))
def test_boxes_read_the_same_in_slices(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The braces are read a slice at a time: cuts that fall inside a run of backslashes,
    a balanced stretch or a run of braces change nothing. (No command without its brace
    here: unboxing one box can make the command before it meet a brace, which the earlier
    unboxing then took as a box; both readings are garbage for garbage.)"""
    monkeypatch.setattr(braces, "_SLICE", 5)
    tokens = [t for t in _BOX_TOKENS if not t.startswith("\\") or t.endswith("{")]
    for text in _random_texts([*tokens, "\\\\", "\\\\{", "{}{}", "}}"], 5000, seed):
        boxes, cut_off = fast.boxes_from_end(text)
        assert ([(b.start, b.end, b.content) for b in boxes], cut_off) == \
            reference_boxes(text), text


@pytest.mark.parametrize("text", [
    "\\boxed{a \\\\{b} c}", "\\boxed{\\\\\\{}", "\\boxed{\\{}\\}}", "\\boxed{{}{}{}}",
    "\\boxed{\\boxed{\\fbox{1}} 2}", "\\boxed  {3}", "\\boxed{" * 20 + "1" + "}" * 20,
    "\\fbox{\\boxed{1}, \\boxed{2}}", "\\boxed{1}\\boxed{2}" * 10,
])
def test_escapes_and_nesting_read_as_before(text: str) -> None:
    boxes, cut_off = fast.boxes_from_end(text)
    assert ([(b.start, b.end, b.content) for b in boxes], cut_off) == reference_boxes(text)


_SPAN_TOKENS = ["$", "$$", "\\(", "\\)", "\\[", "\\]", "\\$", "\\", "x", " ", "=", "\n", "(",
                "[", "\\\\"]


@pytest.mark.parametrize("seed", range(4))
def test_question_spans_are_the_lazy_regex_spans(seed: int) -> None:
    for text in _random_texts(_SPAN_TOKENS, 10_000, seed):
        assert list(_SpanScan(text).spans()) == reference_spans(text), text


_CODE_TOKENS = ["```", "```python", " ```", "``` ", "\n", "\n", "\r", "x", "print(1)", "`",
                " ", "\t", "\u2028", "\x0b", "\xa0"]


@pytest.mark.parametrize("seed", range(4))
def test_code_block_is_the_one_a_line_loop_finds(seed: int) -> None:
    for text in _random_texts(_CODE_TOKENS, 10_000, seed):
        assert extract_code(text) == reference_code(text), text


# --- linear on the worst cases ------------------------------------------------------------

# Each case costs milliseconds to a second (2 MiB of brace pairs, one Python step per
# pair); before, 7 s to over 30 s. CPU time of this process, not wall clock: the machine's
# load must not decide the test.
BOUND_S = 5.0


@pytest.mark.parametrize("name", [*math_cases(), *reference_cases()])
def test_triage_of_a_worst_case_at_the_field_limit_is_bounded(name: str) -> None:
    fields = {**math_cases(), **reference_cases()}[name]
    verifier = MathVerifier(Settings())
    started = time.process_time()
    verifier.triage(MathItem(**fields))
    assert time.process_time() - started < BOUND_S


@pytest.mark.parametrize("pattern", ["\n", "```\n", "```python\n", " ``` \n", "```\nx\n```\n",
                                     "`", "```\n\n"])
def test_code_extraction_at_the_field_limit_is_bounded(pattern: str) -> None:
    text = pattern * (FIELD_BYTES // len(pattern))
    started = time.process_time()
    assert extract_code(text) == reference_code(text)
    assert time.process_time() - started < BOUND_S


_HOSTILE_TOKENS = ["\\boxed{", "\\boxed ", "\\fbox{", "{", "}", "\\{", "$", "$$", "\\(",
                   "\\)", "\\[", "####", "1", "12345", " ", "\n", ",", ".", "/", "\\frac{",
                   "answer is ", "final answer is ", " or ", "=", "\\text{", "√", "(", ")",
                   "^", "%", "\\,", "\\quad", "-", "x", "\\overline{", "0.", "(A) ", "½"]


def test_fuzz_repeated_patterns_stay_linear() -> None:
    """Seeded pairs of hostile tokens, repeated to 512 KiB in the response and the
    reference and to the question's limit: no shape costs more than the bound."""
    rng = random.Random(0)
    verifier = MathVerifier(Settings())
    for _ in range(40):
        pattern = rng.choice(_HOSTILE_TOKENS) + rng.choice(_HOSTILE_TOKENS)
        text = pattern * (512 * 1024 // len(pattern.encode()))
        question = pattern * (100_000 // len(pattern))
        for fields in ({"response": text, "answer": "3"},
                       {"response": "\\boxed{3}", "answer": text + "4"},
                       {"response": "\\boxed{x+1}", "answer": "3", "question": question}):
            started = time.process_time()
            verifier.triage(MathItem(**fields))
            assert time.process_time() - started < BOUND_S, (pattern, list(fields))
    _cached_question_pieces.cache_clear()


def test_a_question_of_unclosed_openers_has_no_math() -> None:
    """Before: 21 s for 100,000 characters of ``\\(`` (the lazy regex's reading is none)."""
    for opener in ("\\(", "\\[", "\\{\\[", "x\\("):
        question = opener * (100_000 // len(opener))
        started = time.process_time()
        assert list(_SpanScan(question).spans()) == []
        assert time.process_time() - started < BOUND_S


def test_extraction_reads_an_escaped_brace_as_text() -> None:
    answer = extract_answer("so \\boxed{\\{1\\} \\cup \\{2\\}}")
    assert answer is not None and answer.items == ("\\{1\\} \\cup \\{2\\}",)


def test_a_long_question_is_not_kept_in_the_cache() -> None:
    """15,000 spans hold 1.4 MB: a cache of 1,024 such questions would keep 1.5 GB."""
    question = "".join(f"${i}$ " for i in range(30_000))[:100_000]
    before = _cached_question_pieces.cache_info().currsize
    assert "29" in question_pieces(question)
    assert _cached_question_pieces.cache_info().currsize == before
    question_pieces(f"Simplify $\\sqrt{{{random.getrandbits(60)}}}$.")  # one not seen yet
    assert _cached_question_pieces.cache_info().currsize == before + 1


def test_a_large_request_is_triaged_on_the_thread_a_small_one_inline() -> None:
    """A request's items all start in one turn of the event loop, so what counts is the
    request's text, not an item's: 2,500 small worst cases (2 ms each) held the loop 5.8 s
    when each item under 8,192 characters was triaged inline. A small request stays
    inline (no hand-off, and never queued behind a large one on the thread)."""
    verifier = MathVerifier(Settings())
    seen: list[threading.Thread] = []
    real = verifier.triage

    def triage(item: MathItem):  # type: ignore[no-untyped-def]
        seen.append(threading.current_thread())
        return real(item)

    verifier.triage = triage  # type: ignore[method-assign]

    async def triaged(items: list[MathItem]) -> list[object]:
        return [await t for t in verifier._triaged(items)]

    small = [MathItem(response="so \\boxed{3}", answer="3")] * 3
    each_small = [MathItem(response="x" * 3000 + " \\boxed{3}", answer=str(k)) for k in range(4)]
    assert all(len(i.response) + len(i.answer) < INLINE_TRIAGE_CHARS for i in each_small)
    assert all(r.correct for r in asyncio.run(triaged(small)))  # type: ignore[attr-defined]
    assert seen == [threading.main_thread()] * 3
    seen.clear()
    results = asyncio.run(triaged(each_small))
    assert [getattr(r, "correct", None) for r in results] == [False, False, False, True]
    assert len(seen) == 4 and threading.main_thread() not in seen
