"""The spawn target of tests/integration/test_parent.py: a child that asks whether it is orphaned only after its launcher died."""

import os
import time


def late_child(launcher_pid: int, out_path: str) -> None:
    deadline = time.monotonic() + 30
    while os.getppid() == launcher_pid and time.monotonic() < deadline:  # until re-parented
        time.sleep(0.05)
    from shared.orphans import orphan_check

    with open(out_path, "w") as fh:
        fh.write(f"{orphan_check()()}")
