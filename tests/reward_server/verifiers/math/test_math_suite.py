"""Agreement with Math-Verify 0.9.0's own test suite, through the real server.

The suite is downloaded at run time (``reward_server.verifiers.math.upstream_suite``'s
``load_suite``: ``pip download --no-binary :all: math-verify==0.9.0``, its ``tests/*.py`` read
with ``ast``); no case is copied here. Every row at the library's default options is sent to
``POST /v1/verify/math`` as ``{"response": pred, "answer": gold}`` with our default
options, in one batch. The test prints agreement per test group and fails below the bar.
"""

from __future__ import annotations

from collections import defaultdict

import httpx
import pytest

from reward_server.verifiers.math.upstream_suite import SuiteCase, load_suite

BAR = 0.97
# Where the suite and one of our rules disagree on purpose (README, "Math verification"):
# inline math ($…$, \(…\)) does not span lines in the suite's latex-only group, but our
# default reading falls back to the last bare number, as math-verify's default parse does.
# And 1 - 1/\mathrm{e} is not 1 + 1/\mathrm{e}: the suite expects "equal" there, from a
# latex2sympy2_extended rule that deletes "\mathrm{e}}" as a unit. And two equations whose
# sides differ (1/2 = 10/9; x = 1/3 ≈ 1.3) are no value for the relation guard (audit 6, 7).
# And arithmetic on numbers left undone, "(9+1)" for 10, states no value: the demo's model
# learned to restate its question ("To convert 9 + 50 to a number, ...") and math-verify
# paid it the sum (the undone-arithmetic guard); and \frac3{3} for 1 is the division left
# undone (a fraction with a whole value against a whole reference; the red-team audit).
KNOWN: set[tuple[str, str]] = {
    ("$9$", "Answer $ \n 9 \n $"),
    ("$9$", "Answer \\( \n 9 \n \\)"),
    ("$1 - \\frac{1}{\\mathrm{e}}$", "$1 + \\frac{1}{\\mathrm{e}}$"),
    ("$10/9$", "Answer $ \\frac{1}{2} \\$ = \\frac{10}{9} $"),
    ("$1/3$", "$x=1/3\\approx1.3$"),
    ("$10$", "Answer \\( (9+1) \\)"),
    ("$1$", "$\\frac3{3} $"),
}


@pytest.fixture(scope="module")
def suite() -> list[SuiteCase]:
    try:
        cases = load_suite()
    except Exception as exc:  # noqa: BLE001 - say why, then fail: never skip silently
        pytest.fail(f"could not obtain math-verify's sdist with pip: {exc}")
    return [c for c in cases if c.at_defaults]


def test_suite_is_the_whole_table(suite: list[SuiteCase]) -> None:
    groups = {c.group for c in suite}
    assert len(suite) >= 260 and len(groups) >= 15, (len(suite), sorted(groups))


def test_agreement_by_group(http: httpx.Client, suite: list[SuiteCase]) -> None:
    items = [{"response": c.pred, "answer": c.gold} for c in suite]
    response = http.post("/v1/verify/math", json={"items": items}, timeout=600)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    by_group: dict[str, list[bool]] = defaultdict(list)
    misses = []
    for case, got in zip(suite, results, strict=True):
        # "timeout" is legitimate on a loaded machine (3 s per item); it scores 0
        assert got["status"] in ("ok", "no_answer", "parse_error", "timeout"), (case, got)
        agree = got["correct"] is case.expected
        by_group[case.group].append(agree)
        if not agree:
            misses.append((case, got))
    print(f"\n{'group':60} agree")
    for group, flags in by_group.items():
        print(f"{group:60} {sum(flags):3}/{len(flags)}")
    agreed = sum(sum(f) for f in by_group.values())
    print(f"{'all':60} {agreed:3}/{len(suite)} = {agreed / len(suite):.1%}")
    for case, got in misses:
        print(f"  miss: {case.group} gold={case.gold[-60:]!r} pred={case.pred[-60:]!r} "
              f"expected={case.expected} got={got}")
    # a miss by timeout (a loaded machine) counts against the bar, not as a wrong rule
    unexplained = [c for c, got in misses
                   if (c.gold, c.pred) not in KNOWN and got["status"] != "timeout"]
    assert agreed / len(suite) >= BAR, f"{agreed}/{len(suite)} below {BAR:.0%}"
    assert not unexplained, [(c.group, c.gold[-60:], c.pred[-60:]) for c in unexplained]
