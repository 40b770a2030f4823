"""What each isolation layer costs a program inside the sandbox: the same probe (a syscall
loop, fork+exec of a tiny program, a pure-Python loop) timed inside one container per
configuration, so container start is not counted. Configurations, each on the same image
with the pool's limits: runc without seccomp, runc with the engine's default profile, runc
with ours (sandbox/seccomp.json), and gVisor (runsc, on a second engine as the tests run
it). Prints a table and writes bench/results/bench_isolation.json.

    python bench/bench_isolation.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox.seccomp import PROFILE  # noqa: E402
from sandbox.testing import IMAGE, runsc_engine  # noqa: E402

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
    args = ap.parse_args()
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
    out = ROOT / "bench" / "results" / "bench_isolation.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
