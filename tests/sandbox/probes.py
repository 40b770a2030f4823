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
print('fork servers', len(fork_server))
for what in ['environ', 'mem']:
    try:
        with open(f'/proc/{{fork_server[0]}}/{{what}}', 'rb') as f:
            f.read(1)
        print('READ the fork server', what)
    except OSError:
        print('blocked the fork server', what)
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
    HOME, HOSTNAME; the server passes none) and for the fork server PATH, LANG and
    PYTHONDONTWRITEBYTECODE. Their memory stays closed there too, and PID 1's fd 1 (a
    mode-0 memfd: harness/serve.py); the fork server's fds 0-2 are /dev/null."""
    environ = "READ" if runtime == "runsc" else "blocked"
    return "\n".join(
        [f"blocked {p}" for p in WRITES]
        + [f"{environ if p == '/proc/1/environ' else 'blocked'} {p}" for p in READS]
        + ["fork servers 1", f"{environ} the fork server environ", "blocked the fork server mem",
           "work dir is writable"])


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
