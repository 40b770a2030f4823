"""What the sandbox's tests and benchmarks share: one small program per language, and a second
Docker engine on this machine, for the tests and benchmarks of several engines and
of an engine that stops (in the package, so bench/ needs nothing from tests/): its own
socket, data and exec roots, no bridge and no iptables (sandbox containers have no network),
with the sandbox image copied over from the main engine. Where
gVisor's runsc is installed (sandbox/ensure_runsc.sh) it is registered as the runtime "runsc",
so the sandbox tests also run under gVisor without touching the main engine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox.engine_checks import (
    SERVE_TIMEOUT_S,
    Revival,
    child_pids,
    engine_answers,
    engine_serves,
    stop_wedged,
)

ROOT = Path(__file__).resolve().parent.parent
# The image the tests build and run: the server's own setting, where the environment gives
# one (a worktree's own tag, so its harness does not replace the image others run)
IMAGE_VARIABLE = "REWARD_SERVER_SANDBOX_IMAGE"
IMAGE = os.environ.get(IMAGE_VARIABLE) or "verifiable-rewards-sandbox:latest"
BRIDGE = "vr-test-br0"
RUNSC = "runsc"
# gVisor's own loopback-only network (the sandbox has none; runsc will not build its network
# from Docker's "none" namespace here), and the container's seccomp profile applied inside
# gVisor (sandbox/seccomp-gvisor.json: denies POSIX message queues, whose names gVisor keeps
# between executions).
RUNSC_ARGS = ["--network=none", "--oci-seccomp"]
# runsc registered once more under a name of an operator's own, not gVisor's docs' "runsc"
RUNSC_ALIAS = "vr-gvisor"

# A program that sums two integers read from stdin, one per language: adding a language to
# sandbox/languages.py needs a row here (the language tests and bench/bench_code.py run them).
SUM_PROGRAMS = {
    "python": "a, b = map(int, input().split())\nprint(a + b)",
    "cpp": "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; "
           "std::cout << a + b << std::endl; }",
    "c": "#include <stdio.h>\nint main(void) { long a, b;\n"
         "  if (scanf(\"%ld %ld\", &a, &b) != 2) return 1;\n  printf(\"%ld\\n\", a + b); }",
    # not called Main, as many datasets' Java solutions are not
    "java": "import java.util.*;\n\npublic class Solution {\n"
            "  public static void main(String[] args) {\n"
            "    Scanner in = new Scanner(System.in);\n"
            "    System.out.println(in.nextLong() + in.nextLong());\n  }\n}",
    "javascript": "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/)"
                  ".map(BigInt);\nconsole.log(String(a + b));",
    "go": "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tvar a, b int64\n"
          "\tfmt.Scan(&a, &b)\n\tfmt.Println(a + b)\n}",
    "rust": "use std::io::Read;\nfn main() {\n    let mut s = String::new();\n"
            "    std::io::stdin().read_to_string(&mut s).unwrap();\n"
            "    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n"
            "    println!(\"{}\", v[0] + v[1]);\n}",
}


class ExtraEngine:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.proc: subprocess.Popen | None = None
        self.runsc = shutil.which("runsc")  # registered as RUNSC when installed
        self._made_bridge = False  # removed on destroy only if this engine made it
        self._revival = Revival("the second Docker engine")
        self.serve_timeout_s = SERVE_TIMEOUT_S
        self._live_restore = False  # ``live_restore``: containers outlive a restart

    def docker(self, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True,
                              text=True, timeout=120, **kwargs)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        # its own bridge: with --bridge none, dockerd deletes docker0, the main engine's
        if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode:
            self._made_bridge = True
            for cmd in (["ip", "link", "add", BRIDGE, "type", "bridge"],
                        ["ip", "addr", "add", "172.31.250.1/24", "dev", BRIDGE],
                        ["ip", "link", "set", BRIDGE, "up"]):
                subprocess.run(cmd, check=True, capture_output=True)
        config = self._write_config()
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 (lives with the process)
        self.proc = subprocess.Popen(
            ["dockerd", "--host", self.host, "--data-root", str(self.root / "data"),
             "--exec-root", str(self.root / "exec"), "--pidfile", str(self.root / "pid"),
             "--config-file", str(config),
             "--bridge", BRIDGE, "--iptables=false", "--ip-masq=false"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120  # a loaded machine starts dockerd slowly
        while self.docker("info").returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()  # one still starting would hold the socket and pidfile
                raise RuntimeError("second dockerd did not start: "
                                   + (self.root / "dockerd.log").read_text()[-2000:])
            time.sleep(0.3)

    def containerd_pid(self) -> int:
        """The containerd this engine started: stopping it (SIGSTOP) wedges the engine as a
        hung containerd does, its ping answered and /info and container work hung."""
        assert self.proc is not None, "the engine has not started"
        (pid,) = [p for p in child_pids(self.proc.pid)
                  if Path(f"/proc/{p}/comm").read_text().strip() == "containerd"]
        return pid

    def answers(self) -> bool:
        """Whether the engine's API answers its ping and /info (``engine_serves``): cheap
        enough to ask before every test."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        return engine_answers(self.socket) and engine_serves(self.socket, self.serve_timeout_s)

    def ensure_running(self) -> None:
        """The engine answers, restarted once if it does not (a test that stopped it and
        could not bring it back); see ``Revival``."""
        self._revival.ensure(self.answers, self._restart)

    def fresh_restarts(self) -> None:
        """A new budget of restarts (``Revival``), for the next module of tests that stop
        the engine: the restarts the modules before it needed are not its own."""
        self._revival = Revival(self._revival.what, self._revival.max_starts)

    def _restart(self) -> None:
        if self.proc is not None:  # wedged rather than stopped: its goroutines first
            stop_wedged(self.proc.pid, self.socket, self.root / "exec", self.root.name,
                        self.serve_timeout_s)
        self.stop()
        self.start()

    def _write_config(self, default_runtime: str | None = None) -> Path:
        config = self.root / "daemon.json"  # its own: never /etc/docker/daemon.json
        runtimes = ({name: {"path": self.runsc, "runtimeArgs": RUNSC_ARGS}
                     for name in (RUNSC, RUNSC_ALIAS)} if self.runsc else {})
        extra: dict[str, object] = {"default-runtime": default_runtime} if default_runtime else {}
        extra["live-restore"] = self._live_restore  # named: a reload leaves what it is not given
        config.write_text(json.dumps({"runtimes": runtimes, **extra}))
        return config

    @contextmanager
    def live_restore(self) -> Iterator[None]:
        """The engine keeps its containers running through its own restart (``restart``)
        while inside, as an operator's ``"live-restore": true`` does; their attach streams
        end with the old dockerd. Reloaded live (SIGHUP), and off again after."""
        self._live_restore = True
        self._reload_config("{{.LiveRestoreEnabled}}", "true")
        try:
            yield
        finally:
            self._live_restore = False
            if self.proc is not None:
                self._reload_config("{{.LiveRestoreEnabled}}", "false")

    def restart(self) -> None:
        """dockerd stopped as an operator stops it (SIGTERM) and started again on the same
        data root: under ``live_restore`` its containers live on, their streams do not."""
        self.stop()
        self.start()

    @contextmanager
    def default_runtime(self, name: str) -> Iterator[None]:
        """The engine runs a container that names no runtime under ``name`` (one it
        registers) while inside, as an operator who sets gVisor for every container does;
        the engine's own default after. Its configuration is reloaded live (SIGHUP)."""
        self._reload(name)
        try:
            yield
        finally:
            self._reload("runc")  # named: a reload leaves a default it is not given as it was

    def _reload(self, default_runtime: str) -> None:
        self._reload_config("{{.DefaultRuntime}}", default_runtime, default_runtime)

    def _reload_config(self, field: str, value: str, default_runtime: str | None = None
                       ) -> None:
        """The configuration written again and reloaded (SIGHUP), until ``docker info``'s
        ``field`` reads ``value``."""
        assert self.proc is not None, "the engine has not started"
        self._write_config(default_runtime)
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while self.docker("info", "--format", field).stdout.strip() != value:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the engine's {field} did not become {value}")
            time.sleep(0.2)

    def load_image(self) -> None:
        if self.docker("image", "inspect", IMAGE).returncode == 0:
            return
        save = subprocess.Popen(["docker", "save", IMAGE], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "-H", self.host, "load"], stdin=save.stdout,
                              capture_output=True, text=True, timeout=600)
        save.wait(timeout=60)
        if load.returncode != 0:
            raise RuntimeError(f"docker load failed: {load.stderr}")

    def stop(self) -> None:
        """Stop the engine as an operator would (SIGTERM); its containers stop with it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                # its whole group: the containerd it started would outlive it otherwise
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def sandbox_containers(self, running: bool = False) -> list[str]:
        out = self.docker("ps", "-q" if running else "-aq",
                          "--filter", "label=verifiable-rewards.sandbox")
        return out.stdout.split()

    def destroy(self) -> None:
        if self.proc is not None:
            ids = self.sandbox_containers()
            if ids:
                self.docker("rm", "-f", *ids)
        self.stop()
        # a dockerd that was killed (a wedged one's restart) leaves its data root's bind
        # mount, and rmtree cannot remove a mount point: each run would leave one behind
        with open("/proc/self/mounts") as mounts:
            points = [line.split()[1] for line in mounts]
        for point in reversed(points):
            if point == str(self.root) or point.startswith(f"{self.root}/"):
                subprocess.run(["umount", "-l", point], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
        if self._made_bridge:  # another engine of this machine may still use it
            subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)


@contextmanager
def runsc_engine(root: Path | None = None) -> Iterator[ExtraEngine]:
    """A second engine with gVisor's runsc installed (sandbox/ensure_runsc.sh) and registered,
    and the sandbox image: the benchmarks' gVisor rows run there, the main engine's
    configuration left alone. Destroyed on exit."""
    subprocess.run(["bash", str(ROOT / "sandbox" / "ensure_runsc.sh")], check=True)
    engine = ExtraEngine(root or Path("/tmp") / f"vr-bench-engine-{os.getpid()}")
    try:
        engine.start()
        engine.load_image()
        yield engine
    finally:
        engine.destroy()
