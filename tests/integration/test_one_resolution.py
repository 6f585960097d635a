"""A run's config is resolved once per process: once in the launcher, once at each actor's start
(shared/resolution.py); the learner, its data plane and trainer, and the collector take what it returned."""

import collections
import os
import subprocess

import psutil

from tests.support.launcher import TRAINING, fake_run_cmd
from tests.support.paths import ROOT
from tests.support.runs import free_base_port

COUNTER = os.path.join(ROOT, "tests", "support", "count_resolutions")


def test_the_launcher_and_each_actor_resolve_once(tmp_path):
    log = tmp_path / "resolutions"
    env = dict(os.environ, WARPPIPE_RESOLVE_LOG=str(log), PYTHONPATH=os.pathsep.join([COUNTER, str(ROOT)]))
    cmd = fake_run_cmd(tmp_path / "runs", free_base_port(4) + 2, *TRAINING, "--total-env-steps", "1200")
    launcher = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    actors: set[int] = set()
    out = []
    for line in launcher.stdout:  # the actors' pids while they live (the launcher's direct children)
        out.append(line)
        try:
            actors |= {p.pid for p in psutil.Process(launcher.pid).children()}
        except psutil.Error:  # the launcher has just exited
            pass
    assert launcher.wait(timeout=180) == 0, "".join(out)
    calls = collections.Counter(int(pid) for pid in log.read_text().split())
    assert calls[launcher.pid] == 1, calls
    others = {pid: n for pid, n in calls.items() if pid != launcher.pid}
    assert len(others) == 2 and set(others) <= actors and set(others.values()) == {1}, (calls, actors)
