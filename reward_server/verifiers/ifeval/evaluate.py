"""One response against its instructions: strict, or IFEval's loose reading.

A pure function of its arguments (plain data, so a pool worker can run it): the verifier
calls it in the server process for a response of ordinary size and in a worker for a large
one (``reward_server.verifiers.ifeval``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from reward_server.verifiers.ifeval import language
from reward_server.verifiers.ifeval.checks import INSTRUCTIONS, Kwargs

# (instruction id, its parameters as validated): what ``evaluate`` takes
Spec = tuple[str, Kwargs]


def loose_variants(response: str) -> list[str]:
    """IFEval's loose accuracy reads the response as it is, without its first line, its
    last line or both, each with and without asterisks (lm-eval's
    ``test_instruction_following_loose``); an instruction followed by any of them counts.
    Copies that are equal are read once."""
    lines = response.split("\n")
    without_first = "\n".join(lines[1:]).strip()
    without_last = "\n".join(lines[:-1]).strip()
    without_both = "\n".join(lines[1:-1]).strip()
    variants = [response, response.replace("*", ""), without_first, without_last, without_both,
                without_first.replace("*", ""), without_last.replace("*", ""),
                without_both.replace("*", "")]
    return list(dict.fromkeys(variants))


def evaluate(response: str, specs: Sequence[Spec], strict: bool) -> list[bool | None]:
    """Whether the response follows each instruction; None where langdetect would decide
    and is not installed. A blank text follows nothing (as in the reference)."""
    texts = [t for t in ([response] if strict else loose_variants(response)) if t.strip()]
    has_language = None
    verdicts: list[bool | None] = []
    for instruction_id, kwargs in specs:
        check = INSTRUCTIONS[instruction_id]
        if check.needs_language and texts:
            if has_language is None:
                has_language = language.available()
            if not has_language:
                verdicts.append(None)
                continue
        verdicts.append(any(check.rule(text, kwargs) for text in texts))
    return verdicts


def evaluate_plain(response: str, specs: Sequence[tuple[str, dict]], strict: bool
                   ) -> list[bool | None]:
    """``evaluate`` from plain dicts (what crosses to a pool worker)."""
    return evaluate(response, [(i, INSTRUCTIONS[i].kwargs.model_validate(kw)) for i, kw in specs],
                    strict)


def cache_key(response: str, specs: Sequence[Spec], strict: bool) -> tuple[object, ...]:
    """What a verdict depends on; the response as a digest, so the cache holds no copy of
    a megabyte response."""
    digest = hashlib.blake2b(response.encode("utf-8", "surrogatepass"), digest_size=16)
    return (digest.hexdigest(), strict,
            tuple((i, json.dumps(kw.model_dump(), sort_keys=True)) for i, kw in specs))
