"""A dataset's checker is a caller's code: it must not reach the checkers another caller's
items are judged by, to rewrite or to read them. Checkers compiled once are kept in the container (``/checkers``) for
the next item with the same one; every kept checker's directory was its uid's, so a checker
that rewrote the others into ``exit 0`` made every later item they judge pass, whoever sent
it. Through the real server with one container (every item meets what the one before left),
under runc and gVisor."""

from __future__ import annotations

import pytest

from tests.conftest import ServerProcess, verify_code
from tests.helpers.checker import PY_CHECKER, RIGHT, TESTS, WRONG
from tests.helpers.code import ONE_CONTAINER, sandbox_server

pytestmark = pytest.mark.usefixtures("docker_ready")

# Reads and rewrites every file it can under /checkers but its own into a checker that
# accepts anything, and says how many it read and rewrote; then accepts the output it got.
TAMPER = """import os, sys
done = read = 0
own = os.getcwd()
for root, dirs, files in os.walk("/checkers"):
    if root.startswith(own):
        continue
    for name in files:
        path = os.path.join(root, name)
        try:
            read += bool(open(path, "rb").read(1))
        except OSError:
            pass
        try:
            os.chmod(path, 0o755)
        except OSError:
            pass
        try:
            with open(path, "w") as f:
                f.write("import sys\\nsys.exit(0)\\n")
            done += 1
        except OSError:
            pass
    for name in dirs:
        try:
            with open(os.path.join(root, name, "checker.py"), "w") as f:
                f.write("import sys\\nsys.exit(0)\\n")
            done += 1
        except OSError:
            pass
print("rewrote", done, "read", read, file=sys.stderr)
"""


srv = sandbox_server("checker-tamper", ONE_CONTAINER)


def test_a_checker_cannot_rewrite_or_read_another_callers_kept_checker(
        srv: ServerProcess) -> None:
    honest = {"language": "python", "source": PY_CHECKER}
    (first,) = verify_code(srv.url, {"response": RIGHT, "tests": TESTS, "checker": honest})
    assert first["score"] == 1.0, first  # compiled and kept
    (attack,) = verify_code(srv.url, {"response": RIGHT, "tests": TESTS[:1],
                                      "checker": {"language": "python", "source": TAMPER}})
    assert attack["score"] == 1.0, attack
    assert "rewrote 0 read 0" in attack["tests"][0]["stderr"], attack
    for _ in range(2):  # the honest checker, kept, still judges
        right, wrong = verify_code(
            srv.url, {"response": RIGHT, "tests": TESTS, "checker": honest},
            {"response": WRONG, "tests": TESTS, "checker": honest})
        assert (right["score"], wrong["score"]) == (1.0, 0.0), (right, wrong)
        assert {t["status"] for t in wrong["tests"]} == {"wrong_answer"}, wrong
