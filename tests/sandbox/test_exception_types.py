"""The solution's exceptions as the test code sees them: by their own class or its nearest one
the test process knows (a builtin, a class of the trusted test setup, a trusted standard
module's), with their message and attributes; anything else a RuntimeError, and never a class
of the solution's. On the host (both ends of the proxy's wire, no container), then one
real-shaped row per case through the real server and Docker engine."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandbox.harness.candidate import Candidate, CandidateCrashed
from sandbox.harness.candidate_server import error_reply
from tests.conftest import ServerProcess, verify_code
from tests.helpers.code import sandbox_server


def relayed(exc: BaseException, classes: dict[str, type] | None = None) -> BaseException:
    """``exc`` raised in the solution's process, as the test process raises it."""
    candidate = Candidate()
    candidate.classes = classes or {}
    reply = json.loads(json.dumps(error_reply(exc)))
    return candidate.exception_for(reply["error"])


def caught(expression: str) -> BaseException:
    try:
        eval(expression)
    except BaseException as exc:  # noqa: BLE001
        return exc
    raise AssertionError(f"{expression} raised nothing")


def solution_class(name: str, *bases: type, **body: Any) -> type:
    """A class as the solution's module defines it."""
    return type(name, bases, {"__module__": "solution", **body})


def setup_class(name: str, *bases: type, **body: Any) -> type:
    """A class as the trusted test setup defines it."""
    return type(name, bases, {"__module__": "__test__", **body})


@pytest.mark.parametrize(("raised", "kind", "text"), [
    ("int('negative')", ValueError, "'negative'"),
    ("{}['k']", KeyError, "'k'"),
    ("__import__('json').loads('')", json.JSONDecodeError, "Expecting value"),
    ("b'\\xff'.decode()", UnicodeDecodeError, "can't decode byte 0xff"),
    ("open('/nonexistent/x')", FileNotFoundError, "No such file"),
])
def test_builtin_and_standard_exceptions_keep_their_type_and_message(
        raised: str, kind: type, text: str) -> None:
    original = caught(raised)
    exc = relayed(original)
    assert type(exc) is kind and text in str(exc), (exc, original)
    assert exc.args == original.args


def test_a_json_decode_error_keeps_its_position() -> None:
    exc = relayed(caught("__import__('json').loads('[1,')"))
    assert isinstance(exc, json.JSONDecodeError) and isinstance(exc, ValueError)
    assert (exc.pos, exc.lineno, exc.colno) == (3, 1, 4)  # type: ignore[attr-defined]


def test_a_subclass_of_the_solutions_arrives_as_its_nearest_builtin() -> None:
    negative = solution_class("NegativeError", ValueError)
    exc = relayed(negative("negative input"))
    assert type(exc) is ValueError and str(exc) == "negative input"
    unicode = solution_class("BadText", UnicodeDecodeError)
    exc = relayed(unicode("utf-8", b"\xff", 0, 1, "invalid start byte"))
    assert type(exc) is UnicodeDecodeError and exc.reason == "invalid start byte"


def test_a_class_of_the_setups_is_raised_as_the_setups_without_running_its_code() -> None:
    """Its ``__init__`` (which would count) never runs; its args and attributes are set."""
    calls: list[object] = []

    def init(self: BaseException, code: int) -> None:
        calls.append(code)
        super(type(self), self).__init__(f"code {code}")
        self.code = code  # type: ignore[attr-defined]

    mine = setup_class("InvalidInput", ValueError, __init__=init)
    theirs = solution_class("InvalidInput", ValueError, __init__=init)  # shadows the name
    for raised in (mine(404), theirs(404)):
        exc = relayed(raised, {"InvalidInput": mine})
        assert type(exc) is mine and str(exc) == "code 404"
        assert exc.code == 404  # type: ignore[attr-defined]
    assert calls == [404, 404]  # the two raises in the "solution"; none in the test process


@pytest.mark.parametrize("names", [
    ["os.system"], ["builtins.eval"], ["eval"], ["__import__"], ["random._os.error"],
    ["KeyboardInterrupt"], ["SystemExit"], ["GeneratorExit"], ["BaseException"],
    ["StopIteration", "Exception"], ["StopAsyncIteration"], ["collections.abc.Callable"],
    ["Node"], ["Done", "Exception"], ["Abort"], ["x" * 300], [],
])
def test_forged_or_unknown_class_names_are_a_runtime_error(names: list[str]) -> None:
    """Only an Exception the test process may raise, never one that ends an iteration or
    escapes a test's ``except Exception`` (a BaseException out of a test would stop PID 1)."""
    classes = {"Node": setup_class("Node"), "Done": setup_class("Done", StopIteration),
               "Abort": setup_class("Abort", BaseException)}
    candidate = Candidate()
    candidate.classes = classes
    error = {"text": "Forged: x", "types": names, "value": {"l": [{"l": []}, {"d": []}]}}
    raised = candidate.exception_for(error)
    assert type(raised) is RuntimeError and "the solution raised Forged: x" in str(raised)


def test_attributes_that_would_shadow_the_classes_own_are_dropped() -> None:
    mine = setup_class("InvalidInput", ValueError, describe=lambda self: "mine")
    error = {"text": "InvalidInput: x", "types": ["InvalidInput"], "value": {"l": [
        {"l": ["x"]}, {"d": [["describe", "forged"], ["code", {"i": "1"}]]}]}}
    candidate = Candidate()
    candidate.classes = {"InvalidInput": mine}
    exc = candidate.exception_for(error)
    assert type(exc) is mine and exc.describe() == "mine"  # type: ignore[attr-defined]
    assert exc.args == ("x",) and not hasattr(exc, "code")


@pytest.mark.parametrize("error", [
    "ValueError: x", {"text": 1, "types": [], "value": {"l": [{"l": []}, {"d": []}]}},
    {"text": "x", "types": "ValueError", "value": {"l": [{"l": []}, {"d": []}]}},
    {"text": "x", "types": [1], "value": {"l": [{"l": []}, {"d": []}]}},
    {"text": "x", "types": ["ValueError"], "value": {"l": [{"d": []}, {"l": []}]}},
    {"text": "x", "types": ["ValueError"], "value": {"q": 1}},
    {"text": "x", "types": ["ValueError"] * 33, "value": {"l": [{"l": []}, {"d": []}]}},
    {"text": "x", "types": ["ValueError"]},
])
def test_a_malformed_error_reply_is_the_solutions_crash(error: object) -> None:
    assert isinstance(Candidate().exception_for(error), CandidateCrashed)


FAR = -(1 << 40)


@pytest.mark.parametrize(("name", "args", "state"), [
    ("UnicodeDecodeError", ["utf-8", b"x", FAR, FAR + 1, "r"], {}),
    ("UnicodeDecodeError", ["utf-8", b"x", 5, 6, "r"], {}),
    ("UnicodeDecodeError", ["utf-8", b"x", 0, 1, "r"], {"start": 1 << 40}),
    ("UnicodeDecodeError", ["utf-8", b"x", 0, 1, "r"], {"object": "x" * 4}),
    ("UnicodeEncodeError", ["utf-8", "x", FAR, FAR + 1, "r"], {}),
    ("UnicodeTranslateError", ["x", 7, 8, "r"], {}),
    ("Bad", [], {"object": b"x", "start": FAR, "end": FAR + 1}),  # the setup's subclass
], ids=["decode-far", "decode-past-end", "decode-state", "decode-object-type", "encode",
        "translate", "setup-subclass"])
def test_a_unicode_error_out_of_its_objects_bounds_is_a_runtime_error(
        name: str, args: list[Any], state: dict[str, Any]) -> None:
    """Its ``__str__`` (the image's Python 3.11) reads ``object[start]`` unchecked: the test
    process segfaulted formatting one whose start was -2**40."""
    from sandbox.harness.protocol import encode

    candidate = Candidate()
    candidate.classes = {"Bad": setup_class("Bad", UnicodeDecodeError)}
    error = {"text": f"{name}: boom", "types": [name, "UnicodeError", "ValueError"],
             "value": json.loads(json.dumps(encode([args, state])))}
    raised = candidate.exception_for(error)
    assert type(raised) is RuntimeError, type(raised)
    assert "the solution raised" in str(raised)


def test_a_unicode_error_within_bounds_stays_one() -> None:
    exc = relayed(caught("b'ab\\xff'.decode()"))
    assert type(exc) is UnicodeDecodeError and (exc.start, exc.end) == (2, 3)
    assert "can't decode byte 0xff in position 2" in str(exc)


# --- through the server and the sandbox --------------------------------------------------------

# An item's test results are compared, never cached: the same rows run on every server.
SERVER_ENV = {"REWARD_SERVER_CACHE_SIZE": "0"}


srv = sandbox_server("exception-types", SERVER_ENV)


def fenced(source: str) -> str:
    return f"```python\n{source}\n```"


def test_a_solutions_unicode_error_cannot_crash_the_test_process(srv: ServerProcess) -> None:
    solution = ("class E(UnicodeDecodeError):\n    def __str__(self):\n        return 'boom'\n"
                "def f(x):\n    raise E('utf-8', b'x', -(1 << 40), -(1 << 40) + 1, 'r')\n")
    (result,) = verify_code(srv.url, {"response": fenced(solution),
                                      "test_code": "r = f(1)\nassert r == 2"})
    assert result["score"] == 0.0, result
    assert "container died" not in result["tests"][0]["stderr"], result
    assert "RuntimeError" in result["tests"][0]["stderr"], result


# A HumanEval-style row: check(candidate) expects a ValueError for bad input.
PARSE_TEST = (
    "import json\n\n"
    "def check(candidate):\n"
    "    assert candidate('[1, 2]') == [1, 2]\n"
    "    for bad in ('[1,', ''):\n"
    "        try:\n"
    "            candidate(bad)\n"
    "        except ValueError as e:\n"
    "            assert str(e), 'the message is kept'\n"
    "        else:\n"
    "            raise AssertionError('no ValueError for ' + repr(bad))\n"
    "    try:\n"
    "        candidate('{')\n"
    "    except json.JSONDecodeError as e:\n"
    "        assert e.pos == 1\n"
)


@pytest.mark.parametrize(("solution", "score"), [
    ("import json\n\ndef parse_list(s):\n    return json.loads(s)\n", 1.0),
    ("import json\n\nclass BadList(json.JSONDecodeError):\n    pass\n\n"
     "def parse_list(s):\n    try:\n        return json.loads(s)\n"
     "    except json.JSONDecodeError as e:\n        raise BadList(e.msg, e.doc, e.pos)\n", 1.0),
    ("def parse_list(s):\n    if not s.endswith(']'):\n        raise KeyError(s)\n"
     "    return eval(s)\n", 0.0),
], ids=["json-decode-error", "subclass-of-it", "wrong-type"])
def test_humaneval_style_check_catches_the_solutions_value_error(
        srv: ServerProcess, solution: str, score: float) -> None:
    (result,) = verify_code(srv.url, {"response": fenced(solution), "test_code": PARSE_TEST,
                                      "entry_point": "parse_list"})
    assert result["score"] == score, result


def test_a_unicode_decode_error_stays_one(srv: ServerProcess) -> None:
    test = ("def check(candidate):\n    assert candidate(b'ok') == 'ok'\n    try:\n"
            "        candidate(b'\\xff')\n    except UnicodeDecodeError as e:\n"
            "        assert e.start == 0 and e.reason == 'invalid start byte'\n"
            "    else:\n        raise AssertionError('no UnicodeDecodeError')\n")
    (result,) = verify_code(srv.url, {"response": fenced("def text(b):\n    return b.decode()\n"),
                                      "test_code": test, "entry_point": "text"})
    assert result["score"] == 1.0, result


# An MBPP row whose setup defines the exception the tests expect, and a helper that checks it.
MBPP_RAISES: dict[str, Any] = {
    "test_setup_code": (
        "class InvalidInput(ValueError):\n    pass\n\n"
        "def raises(f, *args):\n    try:\n        f(*args)\n"
        "    except InvalidInput as e:\n        return str(e)\n    return None\n"),
    "test_list": ["assert safe_div(6, 3) == 2",
                  "assert raises(safe_div, 1, 0) == 'division by zero'",
                  "assert raises(safe_div, 0, 0) == 'division by zero'"],
}


def test_mbpp_setup_exception_is_caught_by_the_setups_class(srv: ServerProcess) -> None:
    """The solution's own class of the setup's name (MBPP runs both in one module, where the
    solution's shadows the setup's), or the setup's used by name: the test's ``except
    InvalidInput`` catches it; a plain ValueError is not an InvalidInput."""
    own = ("class InvalidInput(ValueError):\n    pass\n\n"
           "def safe_div(a, b):\n    if b == 0:\n        raise InvalidInput('division by zero')\n"
           "    return a // b\n")
    plain = own.replace("raise InvalidInput", "raise ValueError")
    setups = own.split("\n\n", 1)[1]  # no class of its own: the setup's, by name
    good, wrong, by_name = verify_code(srv.url, {**MBPP_RAISES, "response": fenced(own)},
                                       {**MBPP_RAISES, "response": fenced(plain)},
                                       {**MBPP_RAISES, "response": fenced(setups)})
    assert (good["score"], good["total"]) == (1.0, 3), good
    assert (by_name["score"], by_name["total"]) == (1.0, 3), by_name
    assert [t["status"] for t in wrong["tests"]] == ["passed", "runtime_error", "runtime_error"]
