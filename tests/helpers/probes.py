"""Isolation probes: programs that try to get out of the sandbox, and what each must print.
One copy, imported by every entry point's tests (the code verifier's items in
test_hostile_code.py, ``/run_code`` in test_run_code.py, a session's cells in
test_sessions.py), so the three are held to the same expectations. Each probe prints one line
per attempt; an expectation that differs by entry point or runtime takes it as an argument and
says why."""

from __future__ import annotations

NETWORK_PROBE = """
import os, socket
interfaces = sorted(os.listdir('/sys/class/net'))
print('interfaces', interfaces)
# Only try to connect when the namespace has nothing but loopback: then no packet can leave
# this container whatever the address, and the attempt fails inside the kernel.
if interfaces == ['lo']:
    for host, port in [('192.0.2.1', 80), ('127.0.0.1', PORT), ('localhost', PORT)]:
        try:
            socket.create_connection((host, port), timeout=1).close()
            print('connected', host)
        except OSError as exc:
            print('blocked', host)
"""


def network_probe(port: int | str) -> str:
    """The probe, aimed at the server's own port (on the host's loopback, which a container
    with a network of its own would reach as 127.0.0.1 only if it shared the host's)."""
    return NETWORK_PROBE.replace("PORT", str(port))


NETWORK_EXPECTED = ("interfaces ['lo']\nblocked 192.0.2.1\nblocked 127.0.0.1\n"
                    "blocked localhost")

# /work is the work dirs' parent (root's), /checkers holds datasets' compiled checkers
WRITES = ['/etc/evil', '/opt/harness/__main__.py', '/usr/bin/python3', '/evil', '/tmp/evil',
          '/var/tmp/evil', '/home/evil', '/root/evil', '/work/evil', '/checkers/evil',
          '/proc/1/mem']
READS = ['/proc/1/environ', '/proc/1/fd/1', '/proc/1/mem', '/etc/shadow', '/root/.bashrc',
         '/var/run/docker.sock', '/run/docker.sock', '/proc/kcore']

FILESYSTEM_PROBE = f"""
import os
for path in {WRITES!r}:
    try:
        with open(path, 'ab') as f:
            f.write(b'x')
        print('WROTE', path)
    except OSError as exc:
        print('blocked', path)
for path in {READS!r}:
    try:
        with open(path, 'rb') as f:
            f.read(1)
        print('READ', path)
    except OSError:
        print('blocked', path)
# The fork server (root's; its pid differs by runtime, and a program forked from it has its
# command line): what PID 1 holds closed, it must too
fork_server = [p for p in os.listdir('/proc')
               if p.isdigit() and os.stat(f'/proc/{{p}}').st_uid == 0
               and 'zygote_main' in open(f'/proc/{{p}}/cmdline').read()]
print('fork server', 'found' if fork_server else 'missing')  # and a loader, in an item
for what in ['environ', 'mem']:
    seen = set()
    for pid in fork_server:
        try:
            with open(f'/proc/{{pid}}/{{what}}', 'rb') as f:
                f.read(1)
            seen.add('READ')
        except OSError:
            seen.add('blocked')
    print(' and '.join(sorted(seen)), 'the fork server', what)
with open('ok.txt', 'w') as f:
    f.write('work dir is writable')
print(open('ok.txt').read())
"""


def filesystem_expected(runtime: str) -> str:
    """Everything blocked but the work dir, under either runtime and whichever entry point:
    PID 1 is the harness in a snippet's container and in a session's alike (the program is a
    fork of the zygote, a fresh interpreter, or a cell of the session's kernel, all under the
    candidate's uid), and the fork server beside it. One exception: gVisor (20221219) lets
    any uid read a process's environ, which for PID 1 holds the image's variables only (PATH,
    HOME, HOSTNAME; the server passes none), for the fork server PATH, LANG and
    PYTHONDONTWRITEBYTECODE, and for an item's loader (a fork of it) the program's own
    environment. Their memory stays closed there too, and PID 1's fd 1 (a
    mode-0 memfd: harness/serve.py); the fork server's fds 0-2 are /dev/null."""
    environ = "READ" if runtime == "runsc" else "blocked"
    return "\n".join(
        [f"blocked {p}" for p in WRITES]
        + [f"{environ if p == '/proc/1/environ' else 'blocked'} {p}" for p in READS]
        + ["fork server found", f"{environ} the fork server environ",
           "blocked the fork server mem", "work dir is writable"])


# Two children that outlive the program: one in a session of its own (out of the program's
# process group, which a group kill misses), one that stays in it.
CHILD_OUTLIVES = ("import subprocess\n"
                  "subprocess.Popen(['sleep', '100'], start_new_session=True)\n"
                  "subprocess.Popen(['python3', '-c', 'import time; time.sleep(100)'])\n"
                  "print('done')")
CHILD_OUTLIVES_EXPECTED = "done"
# The command lines a leftover of CHILD_OUTLIVES would show in a container's process list
CHILD_COMMANDS = ("sleep 100", "time.sleep(100)")

# The processes of the program's own uid besides itself, as it sees them: what an earlier
# program (or another caller's) would have left for it to meet.
THEIR_PROCESSES = """
import os
mine = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()
        and os.stat(f'/proc/{p}').st_uid == os.getuid()]
print(os.uname().nodename, [open(f'/proc/{p}/cmdline').read().replace(chr(0), ' ').strip()
                            for p in mine])
"""

# kill(-1) signals every process the caller may signal but init and itself: every other
# process of the candidate's uid; the harness (init) and the fork server (root) are not its.
KILL_EVERYTHING = "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('still here')"
KILL_EVERYTHING_EXPECTED = "still here"


def kill_everything_raises(runtime: str) -> bool:
    """Whether KILL_EVERYTHING, run where no other process of the candidate's uid is left,
    raises ProcessLookupError (ESRCH) before its print. Linux's kill(-1) succeeds when it
    found any process besides init and the caller, even one it may not signal (the fork
    server, root's: EPERM, which it does not report); gVisor (20221219) counts only those it
    signalled. Either way nothing outside the candidate's uid is reached."""
    return runtime == "runsc"


# Another program's leftovers in this one's own process: every string "zqx-secret-" followed
# by 24 hex digits that it finds in its frames (the sys._getframe chain, each frame's locals,
# globals and constants, code objects' constants within), its heap (every object the
# collector tracks and what each refers to) and its raw memory (every readable anonymous
# mapping, copied through a pipe, which answers EFAULT where a read would crash). Its own
# constant, MINE, must turn up in all three (the search works); anything else is a secret
# of an earlier program that a fork server kept (harness/zygote.py).
SECRET_HUNT = r"""
import ctypes, gc, os, re, sys, types
PATTERN = re.compile(rb"zqx-secret-[0-9a-f]{24}")
MINE = "zqx-secret-" + "0" * 24  # one constant, folded by the compiler
found = {"frames": set(), "heap": set(), "memory": set()}
def note(where, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    found[where].update(m.decode() for m in PATTERN.findall(data))
def look(where, value, depth=0):
    if isinstance(value, (str, bytes, bytearray)):
        note(where, value)
    elif isinstance(value, types.CodeType) and depth < 8:
        note(where, value.co_code)
        for const in value.co_consts:
            look(where, const, depth + 1)
    elif isinstance(value, (tuple, list, set, frozenset)) and depth < 8:
        for item in list(value)[:100000]:
            look(where, item, depth + 1)
    elif isinstance(value, dict) and depth < 8:
        for key, item in list(value.items())[:100000]:
            look(where, key, depth + 1)
            look(where, item, depth + 1)
    elif isinstance(value, (types.FunctionType, types.MethodType)) and depth < 8:
        look(where, getattr(value, "__code__", None), depth + 1)
libc = ctypes.CDLL(None, use_errno=True)
libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
libc.write.restype = ctypes.c_ssize_t
def memory():
    with open("/proc/self/maps") as f:
        regions = [line.split() for line in f]
    r, w = os.pipe()
    os.set_blocking(w, False)
    for region in regions:
        if "r" not in region[1] or (len(region) > 5 and region[5] not in ("[heap]", "[stack]")):
            continue
        start, end = (int(x, 16) for x in region[0].split("-"))
        tail = b""
        while start < end:
            n = libc.write(w, start, min(end - start, 1 << 16))
            if n <= 0:
                break
            chunk = os.read(r, n)
            note("memory", tail + chunk)
            tail, start = chunk[-64:], start + n
    os.close(r)
    os.close(w)
memory()
frame = sys._getframe()
while frame is not None:
    look("frames", frame.f_code)
    look("frames", dict(frame.f_locals))
    look("frames", dict(frame.f_globals))
    frame = frame.f_back
for obj in gc.get_objects():  # strings and code are reached as what a tracked object holds
    for ref in gc.get_referents(obj):
        if isinstance(ref, (str, bytes, bytearray, types.CodeType)):
            look("heap", ref)
for where, secrets in found.items():
    print(where, "mine" if secrets == {MINE} else sorted(secrets - {MINE}) or "MINE MISSING")
"""
SECRET_HUNT_EXPECTED = "frames mine\nheap mine\nmemory mine"


def secret_program(secret: str) -> str:
    """A stdin/stdout program that holds ``secret`` ("zqx-secret-" and 24 hex digits) as a
    constant, and prints the sum of two numbers."""
    return f"SECRET = {secret!r}\nprint(sum(map(int, input().split())))\n"
