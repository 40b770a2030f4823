"""Worst-case math items: text written to make the server process's scans repeat
themselves, at the size the request limits allow.

Each shape aims at one scan: brace matching (runs of braces, escapes, nested boxes),
box discovery (thousands of boxes, a box command followed by a megabyte of spaces), the
math spans of a question (unclosed ``\\(``, ``\\[``, ``$``), the "final answer is" and
``####`` rules, digit runs for the fast path's Fractions, and Unicode rewriting. Every
item's right verdict is 0: none states the reference. ``bench/bench_worst_case.py`` times
them through triage and through the real server; the tests send them to a real server.
Here (not under tests/) so that the bench and the tests share one table.

The format and ifeval shapes aim at what a caller's own parameters make the server do:
compile a pattern (``crafted_classes``), run many instructions on one response
(``ifeval_instructions``), apply every rule to a field of fences."""

from __future__ import annotations

from typing import Any

from reward_server.settings import Settings

FIELD_BYTES: int = Settings.model_fields["max_field_bytes"].default
QUESTION_CHARS = 100_000  # MathItem.question's max_length


def _fill(size: int, pattern: str, prefix: str = "", suffix: str = "") -> str:
    """``prefix``, ``pattern`` repeated, ``suffix``: ``size`` UTF-8 bytes at most."""
    room = (size - len(prefix.encode()) - len(suffix.encode())) // len(pattern.encode())
    return prefix + pattern * max(room, 0) + suffix


def _nested(size: int, levels: int = 16) -> str:
    """``levels`` boxes inside each other, each opening a run of braces, all closed."""
    run = (size - levels * 8) // (2 * levels)
    return ("\\boxed{" + "{" * run) * levels + ("}" * run + "}") * levels


def math_cases(size: int = FIELD_BYTES, question_chars: int = QUESTION_CHARS,
               ) -> dict[str, dict[str, Any]]:
    """Name -> math item (``response``, ``answer``, maybe ``question``) of about ``size``
    bytes in its hostile field; the reference is ``3`` (or ``1``), which none states."""
    response_shapes = {
        "nested boxes": _nested(size),
        "boxes over open braces": _fill(size, "{", "\\boxed{" * 16),
        "boxes over brace pairs": _fill(size, "{}", "\\boxed{" * 16),
        "boxes over escapes": _fill(size, "\\x", "\\boxed{" * 16),
        "boxes over escaped braces": _fill(size, "\\{", "\\boxed{" * 16),
        "deep closed boxes": "\\boxed{" * (size // 16) + "2" + "}" * (size // 16),
        "unclosed boxes": _fill(size, "\\boxed{"),
        "boxes in a list": _fill(size, "\\boxed{1} , "),
        "box command then spaces": _fill(size, " ", "\\boxed"),
        "boxes to unbox over brace runs": "\\boxed{" + "\\fbox{" * 8
        + "{" * (size // 2 - 64) + "}" * (size // 2 - 64) + "}" * 9,
        "frac tower": _fill(size, "\\frac{", "\\boxed{"),
        "dollar run": _fill(size, "$"),
        "hash run": _fill(size, "####"),
        "hash lines": _fill(size, "#### 7\n"),
        "digit run": _fill(size, "1"),
        "hash then digits": _fill(size, "1", "#### "),
        "long boxed number": "\\boxed{" + "9" * 1990 + "}",
        "final answer is $": _fill(size, "final answer is $"),
        "answer is": _fill(size, "the answer is "),
        "unicode roots": _fill(size, "√("),
        "unicode in hashes": _fill(size, "√(½", "#### "),
        # the committed-answer scans (verifiers/math/commit.py)
        "think tags": _fill(size, "<think>"), "fences": _fill(size, "```"),
        "bold runs": _fill(size, "**a**"), "negations": _fill(size, "not 9 but "),
        "comparisons": _fill(size, ", 6 fewer"), "two readings": _fill(size, "\\boxed{1} if "),
        # (the rest of those scans' shapes are timed in test_math_commit.py: the table must
        # fit one request's body limit)
        "answer tags": _fill(size, "<answer>1</answer>"), "fence lines": _fill(size, "```\n```"),
    }
    cases: dict[str, dict[str, Any]] = {
        name: {"response": text, "answer": "3"} for name, text in response_shapes.items()
    }
    question_shapes = {
        "question of \\(": "\\(",
        "question of \\[": "\\[",
        "question of $": "$",
        "question of $$\\(": "$$\\(",
        "question of \\{\\[": "\\{\\[",
        "question of =$": "=$",
    }
    for name, pattern in question_shapes.items():
        cases[name] = {"response": "\\boxed{x+1}", "answer": "3",
                       "question": _fill(question_chars, pattern)}
    return cases


def reference_cases(size: int = FIELD_BYTES) -> dict[str, dict[str, Any]]:
    """Hostile references (a dataset's text, not a completion's): timed through triage by
    the bench; the worker's parse of them is under its timeout."""
    shapes = {"reference of $": "$", "reference of digits": "1", "reference of $$a": "$$a",
              "reference of \\text{": "\\text{a", "reference of answer": "answer "}
    return {name: {"response": "\\boxed{3}", "answer": _fill(size - 1, pattern) + "4"}
            for name, pattern in shapes.items()}


# --- format and ifeval: what a caller's own parameters can make the server do ------------

def crafted_classes(count: int, chars: int = 1000) -> list[str]:
    """``count`` distinct character classes of ``chars`` characters, each a run of distinct
    ranges up to U+FFFF: ``re`` builds a class range by range in Python (~10 ms a range),
    so one costs seconds to compile; identical ranges would be merged first."""
    ranges = (chars - 2) // 3
    return ["[" + "".join(chr(0x100 + n * ranges + k) + "-\uffff" for k in range(ranges)) + "]"
            for n in range(count)]


_COSTLY = [  # IFEval's instructions that read a text at the most cost a character
    ("length_constraints:number_sentences", lambda k: {"relation": "at least",
                                                       "num_sentences": k}),
    ("change_case:capital_word_frequency", lambda k: {"capital_relation": "at least",
                                                      "capital_frequency": k}),
    ("language:response_language", lambda k: {"language": "en"}),
    ("detectable_format:number_bullet_lists", lambda k: {"num_bullets": k}),
    ("length_constraints:number_words", lambda k: {"relation": "at least", "num_words": k}),
    ("keywords:existence", lambda k: {"keywords": [f"word{k}"]}),
]


def ifeval_instructions(count: int) -> list[dict[str, Any]]:
    """``count`` instructions, the costliest kinds in turn, no two alike."""
    return [{"instruction_id": _COSTLY[k % len(_COSTLY)][0],
             "kwargs": _COSTLY[k % len(_COSTLY)][1](k + 1)} for k in range(count)]


def ifeval_response(size: int, seed: int = 0) -> str:
    """``size`` characters of abbreviations, initials, capitals and bullets: every
    tokenizer's slow path (``seed`` makes responses differ, so none is a cached copy)."""
    unit = "Mr. A. B. THE QUICK. brown FOX? * x\n- y\n"
    return (f"{seed} " + unit * (size // len(unit) + 1))[:size]


def format_cases(size: int = FIELD_BYTES) -> dict[str, dict[str, Any]]:
    """Name -> format item: the compile, the search and the built-in rules at their caps."""
    built_in = ["think", "think_answer", {"rule": "think_answer", "strict": True},
                "tag_count"] + [{"rule": "final_answer", "pattern": form, "after_think": after,
                                 "ignore_code": code}
                                for form in ("boxed", "answer_line", "answer_tag")
                                for after in (True, False) for code in (True, False)]
    return {
        "format: 16 crafted classes": {"response": "<think>a</think> 42", "rules": [
            {"rule": "final_answer", "regex": p} for p in crafted_classes(16)]},
        "format: backtracking regex": {"response": "<think>a</think>" + "a" * 64 + "!",
                                       "rules": [{"rule": "final_answer", "regex": "(a+)+$"}]},
        "format: 16 rules over fences": {"response": _fill(size, "```\n"),
                                         "rules": built_in[:16]},
    }


def ifeval_cases(size: int = 8192) -> dict[str, list[dict[str, Any]]]:
    """Name -> a batch of ifeval items: the 2,000 instructions of the finding, 32 an item
    (the cap), on ``size``-character responses, loose and strict."""
    instructions = ifeval_instructions(2016)
    return {f"ifeval: 2,000 instructions, {mode}": [
        {"response": ifeval_response(size, n), "strict": mode == "strict",
         "instructions": instructions[k:k + 32]}
        for n, k in enumerate(range(0, len(instructions), 32))] for mode in ("strict", "loose")}
