"""shared.orphans.orphan_check: a child started by a launcher that is already dead when the child asks (it was
still importing when the launcher was SIGKILLed) must still see that its launcher is gone."""

import subprocess
import sys
import time

from tests.support.paths import ROOT

LAUNCHER = """
import multiprocessing, os, sys
from tests.support.orphan import late_child
ctx = multiprocessing.get_context("spawn")
ctx.Process(target=late_child, args=(os.getpid(), sys.argv[1])).start()
os._exit(0)  # the launcher dies before its child asks who its parent is
"""


def test_a_child_that_asks_after_its_launcher_died_knows_it_is_orphaned(tmp_path):
    out = tmp_path / "orphaned.txt"
    proc = subprocess.run([sys.executable, "-c", LAUNCHER, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 40
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert out.read_text() == "True"  # getppid() read at that point would have named the new parent: "False"
