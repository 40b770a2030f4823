"""What each isolation layer costs a program inside the sandbox: the same probe (a syscall
loop, fork+exec of a tiny program, a pure-Python loop) timed inside one container per
configuration, so container start is not counted. Configurations, each on the same image
with the pool's limits: runc without seccomp, runc with the engine's default profile, runc
with ours (sandbox/seccomp.json), and gVisor (runsc, on a second engine as the tests run
it). Prints a table and writes JSON (date, commit, machine, figures) through
``bench/record.py``.

    python -m bench.bench_isolation [--repeat 3] [--publish]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

from bench.record import commit, record
from sandbox.seccomp import PROFILE
from sandbox.testing import IMAGE, runsc_engine

ROOT = Path(__file__).resolve().parent.parent


PROBE = """
import json, os, subprocess, time
t = time.perf_counter()
for _ in range(200_000):
    os.getppid()
syscall_ns = (time.perf_counter() - t) / 200_000 * 1e9
t = time.perf_counter()
for _ in range(30):
    subprocess.run(["/bin/true"], check=True)
spawn_ms = (time.perf_counter() - t) / 30 * 1e3
t = time.perf_counter()
sum(i * i for i in range(2_000_000))
compute_ms = (time.perf_counter() - t) * 1e3
print(json.dumps({"syscall_ns": syscall_ns, "spawn_ms": spawn_ms, "compute_ms": compute_ms}))
"""

CONFIGS = {  # name: (extra docker run arguments, engine: "main" or "gvisor")
    "runc, no seccomp": (["--security-opt", "seccomp=unconfined"], "main"),
    "runc, engine's default seccomp": ([], "main"),
    "runc, our seccomp": (["--security-opt", f"seccomp={PROFILE}"], "main"),
    "gVisor (runsc)": (["--runtime", "runsc", "--security-opt", f"seccomp={PROFILE}"], "gvisor"),
}


def probe(host: str | None, extra: list[str]) -> dict[str, float]:
    cmd = ["docker", *(["-H", host] if host else []), "run", "--rm", "--network", "none",
           "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
           "--user", "10001:10001", "--memory", "1024m", "--cpus", "1", *extra,
           "--entrypoint", "python3", IMAGE, "-c", PROBE]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="containers per configuration")
    ap.add_argument("--publish", action="store_true",
                    help="also write docs/benchmarks/bench_isolation.json")
    args = ap.parse_args()
    measured_on = commit()
    subprocess.run(["bash", str(ROOT / "sandbox" / "build_image.sh")], check=True)
    rows: dict[str, dict[str, float]] = {}
    with runsc_engine() as engine:
        for name, (extra, where) in CONFIGS.items():
            host = engine.host if where == "gvisor" else None
            runs = [probe(host, extra) for _ in range(args.repeat)]
            rows[name] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"\nmedian of {args.repeat} containers each\n")
    print(f"{'':32} {'syscall ns':>11} {'fork+exec ms':>13} {'compute ms':>11}")
    for name, row in rows.items():
        print(f"{name:32} {row['syscall_ns']:11.0f} {row['spawn_ms']:13.2f} "
              f"{row['compute_ms']:11.0f}")
    path = record("bench_isolation", rows, {"repeat": args.repeat}, publish=args.publish,
                  measured_on=measured_on)
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
