"""One execution can never change another's verdict, or its own into null.

The attacker's victim is the NEXT execution in the same container: the server here runs one
item at a time (``POOL_SIZE=1``) and reuses the container released last first, so
consecutive items share it (each program says where it ran). Each attack of the red-team
report runs, then a probe lists every place a program can write and what it is allowed, and
must print what a fresh container shows, in the same container (proven clean and kept, not
merely replaced). Under runc and under gVisor.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import ROOT, ServerProcess
from tests.helpers.code import ONE_CONTAINER, sandbox_server, verify_one

sys.path.insert(0, str(ROOT / "sandbox" / "harness"))
import slate  # noqa: E402  (what the harness cleans)

pytestmark = pytest.mark.usefixtures("docker_ready")

BUDGET_S = 15  # the item budget of this server: small, so the fair-share test is short


# One warm container, under runc and under gVisor
srv = sandbox_server("clean-slate", {**ONE_CONTAINER,
                                     "REWARD_SERVER_SANDBOX_ITEM_BUDGET_S": str(BUDGET_S),
                                     "REWARD_SERVER_SANDBOX_ACQUIRE_TIMEOUT_S": "60"})


def post(srv: ServerProcess, path: str, payload: dict[str, Any]) -> Any:
    """JSON with ASCII escapes: a lone surrogate in a program travels as ``\\ud800``."""
    with srv.client() as c:
        return c.post(path, content=json.dumps(payload),
                      headers={"content-type": "application/json"})


# An item's result; its programs travel with ASCII escapes, as ``post``'s do
run = functools.partial(verify_one, ascii_json=True)


# Prefixed to each program: says which container ran it (its hostname is the container id),
# on stderr, which the result carries.
WHERE = ("import os as _os, sys as _sys\n"
         "print('ran in', _os.uname().nodename, file=_sys.stderr, flush=True)\n")


def where(result: dict[str, Any]) -> str:
    """The container a result's program ran in (see WHERE)."""
    found = re.search(r"ran in (\S+)", result["tests"][0]["stderr"])
    assert found, result
    return found.group(1)


# Everything a program can observe of the state an earlier one could leave: every place it can
# write, the free space there, SysV IPC, its limits, 300 MB of memory, who its parent is.
PROBE = r"""
import os, resource
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        return f"unreadable ({exc.errno})"
here = os.path.basename(os.getcwd())
work = listing("/work")
print("work", [n for n in work if n != here] if isinstance(work, list) else work)
print("cwd", sorted(set(os.listdir(".")) - {"main.py"}))
print("shm", listing("/dev/shm"), "mqueue", listing("/dev/mqueue"), "tmp", listing("/tmp"))
try:  # Linux lists them; gVisor only counts them (and so do we, for both)
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as f:
            print("sysv", kind, f.read().splitlines()[1:])
except FileNotFoundError:
    import ctypes
    libc = ctypes.CDLL(None)
    shm, info = (ctypes.c_ulong * 8)(), (ctypes.c_int * 16)()
    print("sysv shm pages", libc.shmctl(0, 14, shm) >= 0 and shm[1],  # shm_info.shm_tot
          "msg", libc.msgctl(0, 12, info) >= 0 and info[0],  # msginfo.msgpool
          "sem", libc.semctl(0, 0, 19, info) >= 0 and info[7])  # seminfo.semusz
for path in ("/work", "/dev/shm"):
    st = os.statvfs(path)
    print("free MB", path, (st.f_bavail * st.f_frsize) >> 20)
print("limits", [resource.getrlimit(getattr(resource, n)) for n in
                 ("RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_CPU")])
x = bytearray(300 << 20)
for i in range(0, len(x), 4096):
    x[i] = 1
del x
print("allocated 300 MB")
print("uid", os.getuid(), "parent", os.stat(f"/proc/{os.getppid()}").st_uid,
      "init", os.stat("/proc/1").st_uid)
"""


@pytest.fixture(scope="module")
def fresh(srv: ServerProcess) -> str:
    """What the probe prints in a fresh container."""
    return probe(srv)[0]


def probe(srv: ServerProcess) -> tuple[str, str]:
    """The probe's output (printed to stderr, which the result carries) and its container."""
    wrapped = WHERE + "import sys\nsys.stdout = sys.stderr\n" + PROBE
    result = run(srv, response=wrapped, tests=[{"output": "?"}], memory_mb=512,
                 time_limit_s=BUDGET_S)
    assert result["tests"][0]["status"] == "wrong_answer", result["tests"]
    host = where(result)
    text = result["tests"][0]["stderr"].split("\n", 1)[1]
    assert "allocated 300 MB" in text, text
    return text, host


def test_programs_run_under_another_uid_than_the_supervisor(fresh: str) -> None:
    assert "uid 10001 parent 0 init 0" in fresh, fresh


# A container may be replaced for what no program did: under gVisor the pids headroom is read
# from the engine's stats after each execution, and a loaded engine that answers twice with an
# empty body makes it unknown (pool.py), which replaces the container. So the attack runs up
# to this many times: a clean-up that works keeps the container at least once; one that never
# proves it clean (and so always replaces) fails every time.
ATTEMPTS = 3


def assert_next_execution_sees_a_fresh_container(srv: ServerProcess, fresh: str,
                                                 attack: Callable[[], str]) -> None:
    """The probe, run right after ``attack`` (which returns the container it ran in), sees
    what a fresh container shows, every time; and at least once it ran in the attacked
    container (idle containers are reused last in, first out: it was proven clean and kept,
    not merely replaced)."""
    hosts = []
    for _ in range(ATTEMPTS):
        attacked = attack()
        text, host = probe(srv)
        assert text == fresh
        if host == attacked:
            return
        hosts.append((attacked, host))
    pytest.fail(f"the attacked container was replaced, not cleaned, {ATTEMPTS} times: {hosts}")


# --- 1: an answers cache in /work ---------------------------------------------------------------

CACHE_WRITER = """
import hashlib, os, sys
data = sys.stdin.read()
a, b = map(int, data.split())
print(a + b)
key = hashlib.sha256(data.encode()).hexdigest()
for d in ("/work/.answers", os.path.expanduser("~/.answers"), "/dev/shm/.answers",
          "/tmp/.answers", os.path.join(os.getcwd(), "..", ".answers")):  # /tmp: gVisor's
    try:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, key), "w") as f:
            f.write(str(a + b))
    except OSError:
        pass
"""

CACHE_READER = """
import glob, hashlib, os, sys
data = sys.stdin.read()
key = hashlib.sha256(data.encode()).hexdigest()
for pattern in ("/work/.answers/", "/work/*/.answers/", "/dev/shm/.answers/", "/tmp/.answers/"):
    for path in glob.glob(pattern + key):
        print(open(path).read())
        sys.exit(0)
print("no cache")
"""

SUMS = [{"input": f"{k} {k * 3}", "output": str(k * 4)} for k in (1, 7, 12)]


def test_answers_cache_in_work_does_not_reach_the_next_program(srv: ServerProcess,
                                                                fresh: str) -> None:
    def attack() -> str:
        writer = run(srv, response=WHERE + CACHE_WRITER, tests=SUMS)
        assert writer["score"] == 1.0, writer
        reader = run(srv, response=WHERE + CACHE_READER, tests=SUMS)
        assert reader["score"] == 0.0, reader  # 3/3 before: a forged verdict
        return where(reader) if where(reader) == where(writer) else ""  # "": not the setting
    assert_next_execution_sees_a_fresh_container(srv, fresh, attack)


# --- 2: state left in every writable place ------------------------------------------------------

LEAVE_STATE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
done = []
def attempt(name, fn):
    try:
        fn()
        done.append(name)
    except Exception:
        pass
def write(path, data="x"):
    with open(path, "w") as f:
        f.write(data)
attempt("/work/.x", lambda: write("/work/.x"))
attempt("cwd/.x", lambda: write(".x"))
def locked_dir(root):
    os.makedirs(os.path.join(root, "dir", "sub"), exist_ok=True)
    write(os.path.join(root, "dir", "sub", "secret"))
    os.chmod(os.path.join(root, "dir", "sub"), 0)
    os.chmod(os.path.join(root, "dir"), 0)
attempt("cwd/dir mode 000", lambda: locked_dir("."))
attempt("/dev/shm/dir mode 000", lambda: locked_dir("/dev/shm"))
attempt("/dev/shm/x", lambda: write("/dev/shm/x"))
libc.mq_open.restype = ctypes.c_int
def mqueue():
    if libc.mq_open(b"/vrq", os.O_CREAT | os.O_RDWR, 0o666, None) < 0:
        raise OSError(ctypes.get_errno(), "mq_open")
attempt("/dev/mqueue/vrq", mqueue)
def sysv():
    shm = libc.shmget(0x5eed, 1 << 20, 0o1666)  # IPC_CREAT | 0666
    msg = libc.msgget(0x5eed, 0o1666)
    sem = libc.semget(0x5eed, 1, 0o1666)
    if min(shm, msg, sem) < 0:
        raise OSError(ctypes.get_errno(), "sysv")
attempt("sysv shm, msg, sem", sysv)
attempt("cwd mode 000", lambda: os.chmod(".", 0))
print(done)
"""


def test_state_left_anywhere_is_gone_for_the_next_program(srv: ServerProcess, fresh: str) -> None:
    def attack() -> str:
        result = run(srv, response=WHERE + LEAVE_STATE, tests=[{"output": "?"}])
        assert result["tests"][0]["status"] == "wrong_answer", result
        return where(result)
    assert_next_execution_sees_a_fresh_container(srv, fresh, attack)


MQUEUE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("exists" if libc.mq_open(b"/vr-left", os.O_RDONLY) >= 0 else "absent")
libc.mq_open(b"/vr-left", os.O_CREAT | os.O_RDWR, 0o600, None)
"""


def test_posix_message_queue_names_do_not_persist(srv: ServerProcess) -> None:
    """A queue's name alone carries data (``/answer-<hash>-<digit>``). runc: the harness
    empties /dev/mqueue. gVisor has no /dev/mqueue to list and remove them by, so there
    sandbox/seccomp-gvisor.json denies mq_open (runsc registered with --oci-seccomp)."""
    first = run(srv, response=MQUEUE, tests=[{"output": "absent"}])
    second = run(srv, response=MQUEUE, tests=[{"output": "absent"}])
    assert first["score"] == second["score"] == 1.0, (first, second)


def test_the_places_a_program_can_write_are_the_ones_cleaned(srv: ServerProcess) -> None:
    """The clean-up empties the work dir and slate.SHARED_DIRS: prove there is nothing else
    a program can write (character devices such as /dev/null hold no state). A read-only
    mount holds nothing writable whatever its modes say (EROFS), so the survey walks the
    writable mounts only, each up to the mounts inside it: a walk of the whole image (its
    Java, Go and Rust trees) outlasts the item budget under gVisor on a loaded machine."""
    survey = r"""
import os, stat
writable = {}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    writable[fields[4].replace("\\040", " ")] = "ro" not in fields[5].split(",")
found = []
for top in sorted(m for m, rw in writable.items() if rw):
    if top.startswith(("/proc", "/sys")):
        continue
    if not os.path.isdir(top):  # a file mounted on its own
        if os.path.isfile(top) and os.access(top, os.W_OK):
            found.append(top)
        continue
    for root, dirs, files in os.walk(top, topdown=True):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in writable]
        if os.access(root, os.W_OK):
            found.append(root)
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(root, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode) and os.access(path, os.W_OK):
                found.append(path)
assert writable.get("/") is False, "the image's root is mounted read-only"
print(sorted(p if p != os.getcwd() else "CWD" for p in found))
"""
    result = run(srv, response="import sys\nsys.stdout = sys.stderr\n" + survey,
                 tests=[{"output": "?"}], time_limit_s=BUDGET_S)
    assert result["tests"][0]["status"] == "wrong_answer", result  # ran to its end
    found = set(ast.literal_eval(result["tests"][0]["stderr"].strip()))
    # runc: the work dir, /dev/shm, /dev/mqueue; gVisor: no /dev/mqueue, and a tmpfs on /tmp
    assert "CWD" in found and found - {"CWD"} <= set(slate.SHARED_DIRS), found


# --- 3, 4: the supervisor is out of reach -------------------------------------------------------

REACH_SUPERVISOR = r"""
import os, resource, signal
for pid, limit, value in ((os.getppid(), resource.RLIMIT_FSIZE, (1 << 20, 1 << 20)),
                          (1, resource.RLIMIT_FSIZE, (0, 0)),
                          (1, resource.RLIMIT_NOFILE, (3, 3))):
    try:
        resource.prlimit(pid, limit, value)
        print("prlimit", pid, "done")
    except OSError:
        print("prlimit blocked")
for pid, sig in ((os.getppid(), signal.SIGKILL), (os.getppid(), signal.SIGSTOP),
                 (1, signal.SIGINT), (1, signal.SIGTERM)):
    try:
        os.kill(pid, sig)
        print("kill", pid, sig, "done")
    except OSError:
        print("kill blocked")
try:  # every process it may signal: none but itself, which kill(-1) spares
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
"""


@pytest.mark.parametrize("mode", ["stdio", "assert"])
def test_the_supervisor_cannot_be_reached(srv: ServerProcess, fresh: str, mode: str) -> None:
    def attack() -> str:
        if mode == "stdio":
            expected = "\n".join(["prlimit blocked"] * 3 + ["kill blocked"] * 4)
            result = run(srv, response=WHERE + REACH_SUPERVISOR, tests=[{"output": expected}])
            assert result["tests"][0]["status"] == "passed", result
        else:
            program = (WHERE + "def f():\n    return 1\n"
                       + REACH_SUPERVISOR.replace("print(", "("))
            result = run(srv, response=program, test_code="assert f() == 1", entry_point="f")
            assert result["status"] == "ok" and result["score"] == 1.0, result
        # every later Python stdin/stdout item in this container still runs normally
        honest = run(srv, response=WHERE + "print(sum(map(int, input().split())))", tests=SUMS)
        assert (honest["status"], honest["score"]) == ("ok", 1.0), honest
        return where(result) if where(honest) == where(result) else ""
    assert_next_execution_sees_a_fresh_container(srv, fresh, attack)


# --- 5: a malformed first frame -----------------------------------------------------------------

WRONG_ADD = "def add(a, b):\n    return a - b\n"


@pytest.mark.parametrize("frame", [
    "struct.pack('>I', 1) + b'5'",  # the report's: a JSON number, not an object
    "struct.pack('>I', 2) + b'[]'",
    "struct.pack('>I', 13) + b'{\"ready\": 1}'",
    "struct.pack('>I', 4) + b'\\xff\\xfe\\xfd\\xfc'",
    "struct.pack('>I', 1 << 30)",  # then nothing
    "struct.pack('>I', 22) + b'{\"load_error\": [1, 2]}'",
])
def test_malformed_first_frame_scores_zero_not_null(srv: ServerProcess, frame: str) -> None:
    program = f"{WRONG_ADD}import os, struct\nos.write(4, {frame})\n"
    result = run(srv, response=program, test_code="assert add(1, 2) == 3\nassert add(0, 0) == 0",
                 entry_point="add")
    assert result["score"] == 0.0 and result["status"] == "ok", result
    assert result["total"] == 2


def test_malformed_frame_in_a_batch_is_a_zero_not_a_503(srv: ServerProcess) -> None:
    program = WRONG_ADD + "import os, struct\nos.write(4, struct.pack('>I', 1) + b'5')\n"
    label = {"verifier": "code", "test_code": "assert add(1, 2) == 3", "entry_point": "add"}
    r = post(srv, "/get_reward", {"query": ["Q: 2+2? \\boxed{4}", "Q: add " + program],
                                  "prompts": ["Q: 2+2? ", "Q: add "],
                                  "labels": ["4", json.dumps(label)]})
    assert r.status_code == 200, r.text  # a 503 for the whole batch before
    assert r.json()["rewards"] == [1.0, 0.0]


def test_setup_that_calls_the_candidate_and_fails_scores_zero(srv: ServerProcess) -> None:
    """Test code whose setup uses the candidate fails because of the candidate: 0, not null;
    setup that fails before the candidate runs is the dataset's: null (bad_tests)."""
    raises = "def add(a, b):\n    raise ValueError('no')\n"
    test_code = "x = add(1, 2)\nassert x == 3"
    result = run(srv, response=raises, test_code=test_code, entry_point="add")
    assert (result["status"], result["score"]) == ("ok", 0.0), result
    broken = run(srv, response="def add(a, b):\n    return a + b\n",
                 test_code="import no_such_module\nassert add(1, 2) == 3", entry_point="add")
    assert (broken["status"], broken["score"]) == ("bad_tests", None), broken


@pytest.mark.parametrize(("program", "test_code"), [
    ("def f(x):\n    raise AssertionError(10 ** 5000)\n",
     "def check(candidate):\n    assert candidate(1) == 2\n\ncheck(f)\n"),
    ("def f(x):\n    raise AssertionError(10 ** 5000)\n", "assert f(1) == 2\nassert f(2) == 3\n"),
    ("def f(x):\n    raise ValueError(10 ** 5000)\n", "r = f(1)\nassert r == 2\n"),
], ids=["check", "asserts", "statement"])
def test_an_exception_whose_message_cannot_be_made_is_the_solutions_failure(
        srv: ServerProcess, program: str, test_code: str) -> None:
    """An exception whose ``str`` raises (an int past Python's 4300 digits) failed the tests'
    own handler: the harness reported broken tests, a null reward any wrong answer could buy
    (and the cache kept). It is the solution's failure: 0."""
    result = run(srv, response=program, test_code=test_code, entry_point="f")
    assert (result["status"], result["score"]) == ("ok", 0.0), result
    assert "could not be shown" in json.dumps(result), result


# --- 6: text no response can encode -------------------------------------------------------------

@pytest.mark.parametrize(("program", "extra", "shown"), [
    ("def f(x):\n    raise ValueError('\\ud800')\n", {}, "ValueError: \\ud800"),
    ("def f(x):\n    return '\\udfff'\n", {"test_code": "assert f(1) == 'a', f(1)"},
     "AssertionError: \\udfff"),
    ("import sys\ndef f(x):\n    sys.stderr.buffer.write(b'\\xed\\xa0\\x80\\xff')\n"
     "    sys.stderr.flush()\n    raise KeyError(x)\n", {}, "\\xed\\xa0\\x80\\xff"),
    ("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe\\xed\\xa0\\x80')\n"
     "sys.stderr.buffer.write(b'\\xed\\xa0\\x80\\xff')\nsys.stderr.flush()\n"
     "raise ValueError('\\ud800')\n", {"tests": [{"output": "1"}]}, "\\xed\\xa0\\x80\\xff"),
    ("print('\\ud800')\n", {"tests": [{"output": "1"}]}, "\\ud800"),
    ("def f(x):\n    return 1  # \ud800: a lone surrogate in the source itself\n", {}, None),
], ids=["exception", "return_value", "stderr_bytes", "stdio", "print", "source"])
def test_candidate_text_never_fails_a_response(srv: ServerProcess, program: str,
                                               extra: dict[str, Any], shown: str | None) -> None:
    code: dict[str, Any] = {"verifier": "code", "response": program}
    code |= extra if "tests" in extra else {"test_code": "assert f(1) == 2", "entry_point": "f",
                                            **extra}
    r = post(srv, "/v1/rewards", {"items": [
        {"verifier": "math", "response": "\\boxed{4}", "answer": "4"}, code]})
    assert r.status_code == 200, r.text  # a 500 for the whole batch before
    assert r.json()["rewards"] == [1.0, 0.0], r.text
    result = r.json()["results"][1]
    if shown is not None:  # escaped, as text
        assert shown in result["tests"][0]["stderr"], result


# --- 7, 8: space and memory ---------------------------------------------------------------------

FILL_DISK = r"""
import os
chunk = b"x" * (1 << 20)
for directory in ("/work", ".", "/dev/shm"):
    for i in range(1000):
        try:
            with open(os.path.join(directory, f".fill{i}"), "wb") as f:
                for _ in range(15):
                    f.write(chunk)
        except OSError:
            break
print("filled")
"""

FILL_MEMORY = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
for i in range(8):  # 8 SysV segments of 100 MB, each touched so that it holds memory
    ident = libc.shmget(0x1000 + i, 100 << 20, 0o1666)
    address = libc.shmat(ident, None, 0) if ident >= 0 else None
    if address in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(address, 1, 100 << 20)
    libc.shmdt(ctypes.c_void_p(address))
print("held", i + 1)
"""

CPP_SUM = ("#include <iostream>\nint main() { long a, b; std::cin >> a >> b; "
           "std::cout << a + b << std::endl; }")


def test_a_filled_disk_is_empty_for_the_next_program(srv: ServerProcess, fresh: str) -> None:
    def attack() -> str:
        result = run(srv, response=WHERE + FILL_DISK, tests=[{"output": "filled"}],
                     time_limit_s=BUDGET_S)
        assert result["tests"][0]["status"] == "passed", result
        cpp = run(srv, response=CPP_SUM, language="cpp", tests=SUMS)
        assert (cpp["status"], cpp["score"]) == ("ok", 1.0), cpp  # compile_error before
        return where(result)
    assert_next_execution_sees_a_fresh_container(srv, fresh, attack)


def test_memory_held_in_sysv_segments_is_back_for_the_next_program(srv: ServerProcess,
                                                                   fresh: str) -> None:
    def attack() -> str:
        result = run(srv, response=WHERE + FILL_MEMORY, tests=[{"output": "held 8"}],
                     time_limit_s=BUDGET_S)
        assert result["tests"][0]["status"] == "passed", result
        return where(result)
    assert_next_execution_sees_a_fresh_container(srv, fresh, attack)  # memory_limit


# Twelve processes at once, as a program may start them (a pool of workers, a pipeline)
SPAWNER = """
import subprocess
workers = [subprocess.Popen(["sleep", "0.5"]) for _ in range(12)]
print(sum(w.wait() for w in workers))
"""


def test_processes_of_earlier_programs_do_not_wear_the_container_out(srv: ServerProcess) -> None:
    """Under gVisor the container's pids limit counts gVisor's own host threads, which grow
    with every process a program starts (README): at runc's 128 this program killed its
    container (a correct program scored 0), and a few executions later any program did. Each
    round must pass, in one container or in a replacement, never as a wrong verdict."""
    for _ in range(4):
        result = run(srv, response=SPAWNER, tests=[{"output": "0"}], time_limit_s=BUDGET_S)
        assert result["tests"][0]["status"] == "passed", result
        cpp = run(srv, response=CPP_SUM, language="cpp", tests=SUMS)
        assert (cpp["status"], cpp["score"]) == ("ok", 1.0), cpp


# --- 9: fair share ------------------------------------------------------------------------------

def test_an_honest_item_next_to_a_sleeping_one_is_scored(srv: ServerProcess) -> None:
    sleeper = {"response": "import time\ntime.sleep(60)", "time_limit_s": 30,
               "tests": [{"output": ""}] * 25}
    honest = {"response": "print(sum(map(int, input().split())))", "tests": SUMS}
    out: dict[str, Any] = {}

    def post(name: str, item: dict[str, Any]) -> None:
        out[name] = run(srv, **item)

    first = threading.Thread(target=post, args=("sleeper", sleeper))
    first.start()
    time.sleep(0.5)  # the sleeper holds the only container
    post("honest", honest)
    first.join()
    assert (out["honest"]["status"], out["honest"]["score"]) == ("ok", 1.0), out["honest"]
    # the budget, not 25 x 30 s, bounds the wait: the honest item got the container within
    # the acquire timeout (60 s here; past it, it would be sandbox_unavailable, not ok), and
    # the sleeper's tests past its budget say so
    statuses = [t["status"] for t in out["sleeper"]["tests"]]
    assert statuses == ["timeout"] * 25 and out["sleeper"]["score"] == 0.0
    assert "budget" in out["sleeper"]["tests"][-1]["stderr"]


def test_all_or_nothing_stops_at_the_first_failure(srv: ServerProcess) -> None:
    """The first failure decides an all-or-nothing item: the sleeping tests after it never
    hold the container (twenty would take 20 x 2 s, past the item's budget)."""
    program = "import time\nn = int(input())\nif n:\n    time.sleep(2)\nprint(n)"
    tests = [{"input": "0", "output": "1"}] + [{"input": "1", "output": "1"}] * 20
    started = time.monotonic()
    result = run(srv, response=program, tests=tests, all_or_nothing=True)
    # less than the budget the sleepers would run into: a bound against their holding the
    # container, not a speed goal
    assert time.monotonic() - started < BUDGET_S, result
    assert [t["status"] for t in result["tests"]] == ["wrong_answer"] + ["skipped"] * 20
    assert (result["score"], result["total"]) == (0.0, 21)
    tests = tests[:4]
    partial = run(srv, response=program, tests=tests)  # without it every test runs
    assert [t["status"] for t in partial["tests"]] == ["wrong_answer"] + ["passed"] * 3
