"""A Codeforces checker that does ``#include "testlib.h"``, through the real server and Docker
engine: the image has no testlib.h (the item is bad_tests, null, naming it); an operator bakes
theirs in with ``sandbox/build_image.sh --testlib PATH``, and the checker compiles and judges.

The testlib.h here is a stand-in written for this test, with the subset a checker uses
(``registerTestlibCmd``, the ``inf``/``ouf``/``ans`` readers, ``quitf`` with ``_ok``/``_wa``/
``_pe``/``_fail`` as testlib's exit codes), never the real file fetched from anywhere."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT, ServerProcess, run_server, verify_code, wait_for_sandbox
from tests.helpers.checker import RIGHT, TESTS, WRONG

TESTLIB_STAND_IN = r"""// A stand-in for testlib.h, written for tests/sandbox/test_testlib.py
#pragma once
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

enum TResult { _ok = 0, _wa = 1, _pe = 2, _fail = 3 };

[[noreturn]] inline void quitf(TResult result, const char *format, ...) {
  static const char *words[] = {"ok", "wrong answer", "wrong output format", "FAIL"};
  std::fprintf(stderr, "%s ", words[result]);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::exit(result);
}

struct InStream {
  std::ifstream in;
  TResult at_end = _fail;  // what running out of tokens means for this stream
  void open(const char *path, TResult result) {
    in.open(path);
    at_end = result;
    if (!in) quitf(_fail, "cannot open %s", path);
  }
  long long readLong() {
    long long x;
    if (!(in >> x)) quitf(at_end, "expected an integer");
    return x;
  }
  int readInt() { return static_cast<int>(readLong()); }
  std::string readToken() {
    std::string s;
    if (!(in >> s)) quitf(at_end, "unexpected end of file");
    return s;
  }
  bool seekEof() {
    in >> std::ws;
    return in.peek() == EOF;
  }
};

inline InStream inf, ouf, ans;

inline void registerTestlibCmd(int argc, char *argv[]) {
  if (argc < 4) quitf(_fail, "usage: checker <input> <output> <answer>");
  inf.open(argv[1], _fail);
  ouf.open(argv[2], _pe);
  ans.open(argv[3], _fail);
}
"""

# Codeforces 1352A's checker as a judge writes it with testlib: the count must be the
# answer's, each term round, the terms summing to n
TESTLIB_CHECKER = r"""#include "testlib.h"

static bool round_number(long long x) {
  if (x <= 0) return false;
  while (x % 10 == 0) x /= 10;
  return x < 10;
}

int main(int argc, char *argv[]) {
  registerTestlibCmd(argc, argv);
  int t = inf.readInt();
  for (int c = 1; c <= t; c++) {
    long long n = inf.readLong(), best = ans.readLong(), sum = 0;
    for (long long i = 0; i < best; i++) ans.readLong();
    long long k = ouf.readLong();
    if (k != best) quitf(_wa, "case %d: %lld terms, %lld suffice", c, k, best);
    for (long long i = 0; i < k; i++) {
      long long x = ouf.readLong();
      if (!round_number(x)) quitf(_wa, "case %d: %lld is not round", c, x);
      sum += x;
    }
    if (sum != n) quitf(_wa, "case %d: sum %lld, not %lld", c, sum, n);
  }
  if (!ouf.seekEof()) quitf(_pe, "extra output");
  quitf(_ok, "%d cases", t);
}
"""


@pytest.fixture(scope="module")
def testlib_image(docker_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The sandbox image with the stand-in baked in, under a tag of its own (removed after)."""
    header = tmp_path_factory.mktemp("testlib") / "testlib.h"
    header.write_text(TESTLIB_STAND_IN)
    tag = f"verifiable-rewards-sandbox:testlib-test-{os.getpid()}"
    out = subprocess.run(["bash", str(ROOT / "sandbox" / "build_image.sh"), "--tag", tag,
                          "--testlib", str(header)], capture_output=True, text=True,
                         timeout=1200)
    assert out.returncode == 0, out.stderr[-2000:]
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def srv(testlib_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_SANDBOX_IMAGE": testlib_image, "REWARD_SERVER_SANDBOX_POOL_SIZE": "1",
           "REWARD_SERVER_CACHE_SIZE": "0"}
    with run_server(Path(tmp_path_factory.mktemp("testlib-server")), env=env) as server:
        wait_for_sandbox(server.url, timeout_s=180)
        yield server


def item(response: str) -> dict:
    return {"response": response, "tests": TESTS,
            "checker": {"language": "cpp", "source": TESTLIB_CHECKER}}


def test_without_testlib_the_item_is_bad_tests(server: ServerProcess) -> None:
    """The default image has no testlib.h: the checker does not compile, the dataset's
    fault (null), and the detail names the header."""
    wait_for_sandbox(server.url, timeout_s=180)
    (result,) = verify_code(server.url, item(RIGHT))
    assert (result["status"], result["score"]) == ("bad_tests", None), result
    assert "testlib.h" in result["detail"], result


def test_a_testlib_checker_judges_with_the_operators_header(srv: ServerProcess) -> None:
    right, wrong = verify_code(srv.url, item(RIGHT), item(WRONG))
    assert (right["status"], right["score"]) == ("ok", 1.0), right
    assert wrong["score"] == 0.0, wrong
    assert "wrong answer case 1: 1 terms, 2 suffice" in wrong["tests"][0]["stderr"], wrong
