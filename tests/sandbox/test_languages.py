"""Every language of ``sandbox/languages.py`` through the real server and Docker engine: the
sum of two numbers, a compile error with its message, and hostile programs (an infinite loop,
a fork bomb, a memory hog, an output flood, the network), each leaving the pool clean. The
pure parts (aliases, the Java main-class finder) are unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sandbox.languages import LANGUAGES, known_names, resolve
from sandbox.testing import SUM_PROGRAMS
from sandbox.toolchains.java_build import top_level_types
from tests.conftest import ServerProcess
from tests.helpers.code import code_server, verify
from tests.helpers.sandbox_pool import POOL, assert_clean

SUM_TESTS = [{"input": "1 2\n", "output": "3\n"}, {"input": "10 -4", "output": "6"},
             {"input": "4000000000 5000000000", "output": "9000000000"}]

# A program that does not compile, and a fragment of the message the detail must carry.
BROKEN = {
    "python": ("def f(:\n    pass", "SyntaxError"),
    "cpp": ("int main() { return x; }", "was not declared in this scope"),
    "c": ("int main(void) { return x; }", "undeclared (first use"),
    "java": ("public class Main {\n  public static void main(String[] a) {\n"
             "    int x = \"s\";\n  }\n}", "incompatible types"),
    "javascript": ("function f( {\n", "SyntaxError"),
    "go": ("package main\n\nfunc main() {\n\tx := 1\n}", "declared but not used"),
    "rust": ("fn main() {\n    let x: i32 = \"s\";\n}", "mismatched types"),
}

PORT = "PORT"  # the server's port on the host's loopback, filled in by the test

# Hostile programs per language: (infinite loop, fork bomb, memory hog, output flood,
# network probe). The probe prints "blocked" once per address it fails to reach: an
# address outside, and the server's port on the host's loopback.
HOSTILE: dict[str, dict[str, str]] = {
    "python": {
        "loop": "while True:\n    pass",
        "fork": "import os\nwhile True:\n    os.fork()",
        "memory": "xs = []\nwhile True:\n    xs.append(bytearray(10 * 1024**2))",
        "flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
        "network": "import socket\nfor a in [('192.0.2.1', 80), ('127.0.0.1', PORT)]:\n"
                   "    try:\n        socket.create_connection(a, timeout=1).close()\n"
                   "        print('connected')\n    except OSError:\n        print('blocked')",
    },
    "cpp": {
        "loop": "int main() { volatile long x = 0; for (;;) x++; }",
        "fork": "#include <unistd.h>\nint main() { for (;;) fork(); }",
        "memory": "#include <vector>\nint main() { std::vector<std::vector<char>> v;\n"
                  "  for (;;) v.emplace_back(10 << 20, 'x'); }",
        "flood": "#include <cstdio>\n#include <string>\nint main() { std::string s(65536, 'x');\n"
                 "  for (;;) fwrite(s.data(), 1, s.size(), stdout); }",
        "network": None,  # the same calls as C, below
    },
    "c": {
        "loop": "int main(void) { volatile long x = 0; for (;;) x++; }",
        "fork": "#include <unistd.h>\nint main(void) { for (;;) fork(); }",
        "memory": "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
                  "int main(void) { for (;;) { char *p = malloc(10 << 20);\n"
                  "  if (!p) { perror(\"malloc\"); return 1; }\n  memset(p, 1, 10 << 20); } }",
        "flood": "#include <stdio.h>\n#include <string.h>\nint main(void) { char s[65536];\n"
                 "  memset(s, 'x', sizeof s); for (;;) fwrite(s, 1, sizeof s, stdout); }",
        "network": "#include <arpa/inet.h>\n#include <stdio.h>\n#include <sys/socket.h>\n"
                   "#include <unistd.h>\nstatic void probe(const char *ip, int port) {\n"
                   "  struct sockaddr_in a = {0}; a.sin_family = AF_INET;\n"
                   "  a.sin_port = htons(port); inet_pton(AF_INET, ip, &a.sin_addr);\n"
                   "  int s = socket(AF_INET, SOCK_STREAM, 0);\n"
                   "  puts(s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0\n"
                   "       ? \"connected\" : \"blocked\"); if (s >= 0) close(s); }\n"
                   "int main(void) { probe(\"192.0.2.1\", 80); probe(\"127.0.0.1\", PORT); }",
    },
    "java": {
        "loop": "public class Main { public static void main(String[] a) {\n"
                "  long x = 0; while (true) { x++; } } }",
        "fork": "public class Main { public static void main(String[] a) throws Exception {\n"
                "  while (true) { new ProcessBuilder(\"java\", \"@java.args\").start();\n"
                "    new Thread(() -> { try { Thread.sleep(100000); } catch (Exception e) {} })"
                ".start(); } } }",
        "memory": "import java.util.*;\npublic class Main { public static void main(String[] a) {\n"
                  "  List<long[]> l = new ArrayList<>(); while (true) l.add(new long[1 << 20]);"
                  " } }",
        "flood": "public class Main { public static void main(String[] a) {\n"
                 "  String s = \"x\".repeat(65536); while (true) System.out.print(s); } }",
        "network": "import java.net.*;\npublic class Main {\n"
                   "  static void probe(String h, int p) { try (Socket s = new Socket()) {\n"
                   "    s.connect(new InetSocketAddress(h, p), 1000);\n"
                   "    System.out.println(\"connected\"); }\n"
                   "    catch (Exception e) { System.out.println(\"blocked\"); } }\n"
                   "  public static void main(String[] a) { probe(\"192.0.2.1\", 80);\n"
                   "    probe(\"127.0.0.1\", PORT); } }",
    },
    "javascript": {
        "loop": "while (true) {}",
        "fork": "const cp = require('child_process');\nwhile (true) {\n"
                "  try { cp.spawn(process.execPath, [__filename], {stdio: 'ignore'}); }"
                " catch (e) {}\n}",
        "memory": "const a = [];\nwhile (true) a.push(new Array(1e6).fill(1.5));",
        # process.stdout.write to a pipe queues what the pipe does not take until the event
        # loop runs, which this loop never lets it: the write that floods the pipe is writeSync
        "flood": "const fs = require('fs');\nconst s = 'x'.repeat(65536);\n"
                 "while (true) fs.writeSync(1, s);",
        "network": "const net = require('net');\nconst probe = (host, port) => new Promise(r => {\n"
                   "  const s = net.connect({host, port, timeout: 1000});\n"
                   "  s.on('connect', () => { s.destroy(); r('connected'); });\n"
                   "  s.on('error', () => r('blocked'));\n"
                   "  s.on('timeout', () => { s.destroy(); r('blocked'); });\n});\n"
                   "(async () => { console.log(await probe('192.0.2.1', 80));\n"
                   "  console.log(await probe('127.0.0.1', PORT)); })();",
    },
    "go": {
        "loop": "package main\n\nfunc main() {\n\tx := 0\n\tfor {\n\t\tx++\n\t}\n}",
        "fork": "package main\n\nimport \"os/exec\"\n\nfunc main() {\n\tfor {\n"
                "\t\texec.Command(\"./main\").Start()\n\t}\n}",
        "memory": "package main\n\nfunc main() {\n\tvar keep [][]byte\n\tfor {\n"
                  "\t\tb := make([]byte, 10<<20)\n\t\tfor i := range b {\n\t\t\tb[i] = 1\n\t\t}\n"
                  "\t\tkeep = append(keep, b)\n\t}\n}",
        "flood": "package main\n\nimport (\n\t\"bytes\"\n\t\"os\"\n)\n\nfunc main() {\n"
                 "\ts := bytes.Repeat([]byte(\"x\"), 65536)\n\tfor {\n\t\tos.Stdout.Write(s)\n"
                 "\t}\n}",
        "network": "package main\n\nimport (\n\t\"fmt\"\n\t\"net\"\n\t\"time\"\n)\n\n"
                   "func main() {\n\tfor _, a := range []string{\"192.0.2.1:80\", "
                   "\"127.0.0.1:PORT\"} {\n"
                   "\t\tif c, err := net.DialTimeout(\"tcp\", a, time.Second); err == nil {\n"
                   "\t\t\tc.Close()\n\t\t\tfmt.Println(\"connected\")\n\t\t} else {\n"
                   "\t\t\tfmt.Println(\"blocked\")\n\t\t}\n\t}\n}",
    },
    "rust": {
        "loop": "fn main() {\n    loop {}\n}",
        "fork": "fn main() {\n    let me = std::env::current_exe().unwrap();\n"
                "    loop {\n        let _ = std::process::Command::new(&me).spawn();\n    }\n}",
        "memory": "fn main() {\n    let mut keep: Vec<Vec<u8>> = Vec::new();\n"
                  "    loop {\n        keep.push(vec![1u8; 10 << 20]);\n    }\n}",
        "flood": "use std::io::Write;\nfn main() {\n    let s = \"x\".repeat(65536);\n"
                 "    let out = std::io::stdout();\n    let mut out = out.lock();\n"
                 "    while out.write_all(s.as_bytes()).is_ok() {}\n}",
        "network": "use std::net::TcpStream;\nuse std::time::Duration;\nfn main() {\n"
                   "    for a in [\"192.0.2.1:80\", \"127.0.0.1:PORT\"] {\n"
                   "        let addr = a.parse().unwrap();\n"
                   "        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {\n"
                   "            Ok(_) => println!(\"connected\"),\n"
                   "            Err(_) => println!(\"blocked\"),\n        }\n    }\n}",
    },
}
HOSTILE["cpp"]["network"] = HOSTILE["c"]["network"]

# what each hostile program must come back as (the fork bomb: whichever limit ends it first)
HOSTILE_STATUS = {"loop": {"timeout"}, "fork": {"timeout", "runtime_error"},
                  "memory": {"memory_limit"}, "flood": {"output_limit"}, "network": {"passed"}}


# --- pure parts ---------------------------------------------------------------------------------


def test_every_language_has_its_rows() -> None:
    for table in (SUM_PROGRAMS, BROKEN, HOSTILE):
        assert set(table) == set(LANGUAGES)


@pytest.mark.parametrize(("name", "canonical"), [
    ("python", "python"), ("py", "python"), ("Python3", "python"), ("cpp", "cpp"),
    ("c++", "cpp"), ("C", "c"), ("java", "java"), ("js", "javascript"), ("node", "javascript"),
    ("nodejs", "javascript"), ("golang", "go"), ("rs", "rust"), (" rust ", "rust")])
def test_aliases(name: str, canonical: str) -> None:
    spec = resolve(name)
    assert spec is not None and spec.name == canonical


def test_unknown_language_and_known_names() -> None:
    assert resolve("cobol") is None
    assert known_names().startswith("python (py, python3), cpp (c++, cxx), c, java, ")


def test_memory_limit_is_filled_into_the_commands() -> None:
    job = LANGUAGES["java"].as_job(300)
    assert "-Xmx300m" in job["run"] and job["memory_rlimit"] == "data"
    assert LANGUAGES["cpp"].as_job(300)["memory_rlimit"] == "as"


@pytest.mark.parametrize(("source", "package", "types"), [
    ("public class Main { public static void main(String[] a) {} }", "", [("Main", True)]),
    ("import java.util.*;\nclass Codechef {\n  public static class Inner {}\n"
     "  public static void main(String[] a) {}\n}", "", [("Codechef", False)]),
    ("package com.acme . solver;\n// public class Fake {}\n/* public class Fake2 {} */\n"
     "final class Helper { String s = \"public class Fake3 {\"; char c = '{'; }\n"
     "@SuppressWarnings(\"x\") public final class A {\n  public final class Nested {}\n}\n"
     "record Pair(int a, int b) {}",
     "com.acme.solver", [("Helper", False), ("A", True), ("Pair", False)]),
])
def test_java_top_level_types(source: str, package: str, types: list) -> None:
    assert top_level_types(source) == (package, types)


# --- through the server -------------------------------------------------------------------------



@pytest.fixture(scope="module")
def srv(docker_ready: None,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"REWARD_SERVER_SANDBOX_POOL_SIZE": str(POOL), "REWARD_SERVER_CACHE_SIZE": "0"}
    with code_server(tmp_path_factory.mktemp("languages"), env=env) as server:
        yield server


@pytest.mark.parametrize("language", sorted(LANGUAGES))
def test_sum_of_two_numbers_and_a_compile_error(srv: ServerProcess, language: str) -> None:
    broken, fragment = BROKEN[language]
    good, bad = verify(
        srv,
        {"response": f"Here it is:\n```{language}\n{SUM_PROGRAMS[language]}\n```\nDone.",
         "language": language, "tests": SUM_TESTS},
        {"response": f"```\n{broken}\n```", "language": language, "tests": SUM_TESTS})
    assert (good["status"], good["passed"], good["total"], good["score"]) == (
        "ok", 3, 3, 1.0), good
    assert all(t["time_ms"] > 0 for t in good["tests"])
    expected = "syntax_error" if language == "python" else "compile_error"
    assert (bad["status"], bad["score"], bad["total"]) == (expected, 0.0, 3), bad
    assert fragment in bad["detail"], bad["detail"]


@pytest.mark.parametrize(("alias", "language"), [("c++", "cpp"), ("JS", "javascript"),
                                                 ("golang", "go"), ("rs", "rust")])
def test_an_alias_runs_its_language(srv: ServerProcess, alias: str, language: str) -> None:
    (result,) = verify(srv, {"response": SUM_PROGRAMS[language], "language": alias,
                             "tests": SUM_TESTS[:1]})
    assert result["score"] == 1.0, result


def test_unknown_language_names_the_known_ones(srv: ServerProcess) -> None:
    with srv.client() as c:
        r = c.post("/v1/verify/code?on_invalid=error", json={"items": [
            {"response": "x", "language": "cobol", "tests": [{"output": ""}]}]})
    assert r.status_code == 422
    assert "unknown language 'cobol'; known: python (py, python3), cpp (c++, cxx)" \
        in r.json()["detail"]


@pytest.mark.parametrize("language", sorted(LANGUAGES))
def test_hostile_programs(srv: ServerProcess, language: str) -> None:
    port = srv.url.rsplit(":", 1)[1]
    kinds = list(HOSTILE_STATUS)
    items = []
    for kind in kinds:
        program = HOSTILE[language][kind].replace(PORT, port)
        output = "blocked\nblocked" if kind == "network" else "never"
        # those expected to end otherwise than by a timeout get time to (a JVM or Node starts
        # in ~0.5 s, seconds on a loaded machine; a garbage collector thrashes before it gives up)
        items.append({"response": program, "language": language,
                      "tests": [{"output": output}],
                      "time_limit_s": 2 if kind in ("loop", "fork") else 8})
    results = verify(srv, *items)
    for kind, result in zip(kinds, results, strict=True):
        assert result["status"] == "ok", (kind, result)
        status = result["tests"][0]["status"]
        assert status in HOSTILE_STATUS[kind], (kind, result)
        assert result["score"] == (1.0 if kind == "network" else 0.0), (kind, result)
    assert_clean(srv)


# rustc reads the kernel's random UUID into the binary when it compiles: a build prints its own
RUST_BUILD_ID = ('const BUILD: &str = include_str!("/proc/sys/kernel/random/uuid");\n'
                 + SUM_PROGRAMS["rust"].replace("fn main() {", "fn main() {\n"
                                                "    eprint!(\"build {}\", BUILD);", 1))


def test_identical_sources_compile_once_across_a_batch(srv: ServerProcess) -> None:
    import random

    nonce = random.getrandbits(64)
    same = f"{RUST_BUILD_ID}\n// {nonce}\n"
    other = f"{RUST_BUILD_ID}\n// {nonce + 1}\n"
    results = verify(srv, *[{"response": same, "language": "rust", "tests": [SUM_TESTS[i % 3]]}
                            for i in range(4)],
                     {"response": other, "language": "rust", "tests": SUM_TESTS[:1]})
    assert [r["score"] for r in results] == [1.0] * 5, results
    builds = [r["tests"][0]["stderr"].split("build ")[1].strip() for r in results]
    assert len(set(builds[:4])) == 1 and builds[4] != builds[0], builds
    # a compile error is shared too: the copies come back with the same message
    broken, fragment = BROKEN["c"]
    errors = verify(srv, *[{"response": f"{broken}\n// {nonce}", "language": "c",
                            "tests": SUM_TESTS} for _ in range(3)])
    assert all(e["status"] == "compile_error" and fragment in e["detail"] and e["total"] == 3
               and e["score"] == 0.0 for e in errors), errors
