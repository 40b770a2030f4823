"""The soft time limit swept over a check's hand-over (tests/reward_server/test_check_worker.py),
in a process of its own: ``python -m tests.helpers.zygote_sweep [--bystander]``.

A worker forks its zygote once it holds its verifier, and the zygote forks a child per item.
Forked from the test process instead (the suite's modules, torch among them, loaded at
collection), each of the sweep's 800 forks copies that process's mappings, which made the
sweep several times slower in the suite than alone. Here the zygote forks from a process
that holds what a worker holds."""

from __future__ import annotations

import sys
import threading

from reward_server import check_worker, process_pool
from tests.helpers.hostile_plugin import HostileItem, HostileResult

POINTS = 400
OK = ("ok", '{"score":1.0,"status":"ok","info":""}')


class Checks:
    """What the zygote's children run: a verifier's ``result_model`` and its check."""
    result_model = HostileResult

    def __init__(self, check) -> None:
        self.check = check


def sweep() -> str | None:
    """Alarms at ``POINTS`` points from the fork to the result (0.2 to 20 ms), each followed
    by an item with no limit of its own: what the first such item that was not answered as
    its own got, or None."""
    check_worker._VERIFIER = Checks(lambda item: HostileResult(score=1.0, status="ok"))
    check_worker._ZYGOTE = check_worker.start_zygote()
    try:
        for k in range(POINTS):
            soft_s = 0.0002 + k * 0.00005
            process_pool._timed(check_worker.run, soft_s, HostileItem(response="x"), 1)
            _, _, fired, value, _ = process_pool._timed(check_worker.run, 120,
                                                        HostileItem(response="x"), 1)
            if fired or value != OK:
                return f"point {k} ({soft_s * 1000:.2f} ms): the next item got {value!r}"
        return None
    finally:
        check_worker._ZYGOTE.close()  # the zygote ends when its channel does


def main(argv: list[str]) -> int:
    stop = threading.Event()
    bystander = threading.Thread(target=stop.wait) if "--bystander" in argv else None
    if bystander is not None:  # a thread the kernel may give the alarm to
        bystander.start()
    try:
        failure = sweep()
    finally:
        stop.set()
        if bystander is not None:
            bystander.join()
    print(failure or f"all {POINTS} points answered in step")
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
