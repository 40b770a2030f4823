"""Pull the final answer out of a free-form completion, and the reference answer out of what
a dataset stored, in the server process: the math verifier's entry points.

Every scan is linear in the length of the completion (no backtracking regular expression
runs over untrusted text, and no text is scanned again per box: the boxes' braces are
matched in one pass, ``reward_server.braces``), so a 1 MB response costs milliseconds and
the worst text at the field limit (``reward_server.worst_case``) well under a second. The
markers are read in ``markers``, and which one the completion commits to is ``commit``'s.
What comes out is an ``Answer``: either LaTeX that states the answer (a box, a GSM8K
``####`` line, the Minerva "final answer is $x$" span) or, when the completion marks no
answer, the end of the text, which the worker hands to math-verify's own extraction (its
"answer …", last-LaTeX and last-number rules) under the pool's timeout.

Rules, first hit wins (the README states them too):
1. the last outermost non-empty ``\\boxed{}``/``\\fbox{}``, or the last "final answer is
   $x$", whichever ends later; boxes separated only by commas, semicolons, "and", "or",
   spaces or math delimiters are read together as one list of answers (the several-answers rule);
2. the last GSM8K ``#### x`` line;
3. otherwise (``auto``, ``last_number``) the last 2,000 characters of the text
   (``markers.ending``) go to math-verify: "answer: x", "answer is x", the last ``$…$``
   group, the last number. ``marked`` skips the last-number rule; ``boxed`` stops after
   rule 1.
"""

from __future__ import annotations

import re
from typing import Any

from reward_server.verifiers.math.commit import committed_answer
from reward_server.verifiers.math.markers import Answer, ExtractMode, last_hashes, unicode_math


def extract_answer(response: str, mode: ExtractMode = "auto", **rules: Any) -> Answer | None:
    """The final answer ``response`` commits to, or None when it commits to none (see
    ``commit.committed_answer``, which says why, and takes the same ``rules``)."""
    answer = committed_answer(response, mode, **rules)
    return answer if isinstance(answer, Answer) else None


_ONE_SPAN = re.compile(r"\$\$?([^$]+)\$\$?")
_MATH_DOLLAR = re.compile(r"(?<!\\)\$")  # "\$18.90" is a dollar sign, not a math span
# "answer" in prose marks a worked solution; "\text{No answer}" alone is a text answer
_TEXT_ONLY = re.compile(r"\\(?:text|textbf|mathrm)\s*\{[^{}$]*\}")


def extract_gold(answer: str) -> Answer:
    """The reference answer: bare LaTeX, or text a dataset stored (boxed, after ``####``,
    a whole worked solution). Bare references are LaTeX; anything with a box, a math
    delimiter (not an escaped ``\\$``) or "answer" in it (unless it is one ``\\text{}``) is
    read by math-verify's extraction."""
    stripped = answer.strip()
    inline = _ONE_SPAN.fullmatch(stripped)
    if inline:  # "$\\frac{1}{2}$": one math span and nothing else is bare LaTeX
        stripped = inline.group(1).strip()
    hashes = last_hashes(stripped)
    if hashes is not None and "\\boxed" not in stripped:
        return Answer((hashes,))
    marked = any(m in stripped for m in ("\\boxed", "\\fbox", "\\(", "\\[")) or (
        _MATH_DOLLAR.search(stripped) is not None
        or ("answer" in stripped.lower() and not _TEXT_ONLY.fullmatch(stripped))
    )
    return Answer((unicode_math(stripped),), kind="text" if marked else "latex")
