"""One learner per run folder (launch/run_lock.py): a second learner on a live run's folder exits 2 naming the first's
pid and leaves the folder alone; once the first is gone (even SIGKILLed) the folder is free again."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from launch.run_lock import LOCK_NAME, RunFolderBusy, RunFolderLock
from tests.support.launcher import EPOCH, TRAINING, Launcher, resume_without_actors
from tests.support.paths import ROOT
from tests.support.runs import free_base_port

HOLD = (  # holds the lock until its stdin closes (or it is killed): an event, not a time
    "import sys; from launch.run_lock import RunFolderLock; "
    "RunFolderLock(sys.argv[1]).acquire(); print('held', flush=True); sys.stdin.read()"
)


def test_a_second_lock_names_the_holders_pid_and_a_dead_holder_frees_the_folder(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderBusy, match=rf"in use by the learner with pid {holder.pid}: one learner per run folder"):
            RunFolderLock(str(tmp_path)).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock = RunFolderLock(str(tmp_path)).acquire()  # the kernel dropped the dead holder's lock
    assert (tmp_path / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    lock.release()
    RunFolderLock(str(tmp_path)).acquire().release()  # and a released lock is free


def test_a_second_learner_on_a_live_runs_folder_exits_2_and_the_first_trains_on(tmp_path):
    run = Launcher(tmp_path, *TRAINING, "--total-env-steps", "0", "--learner.checkpoint-seconds", "1")
    try:
        run.wait_for(EPOCH, timeout=180)
        (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
        deadline = time.monotonic() + 180
        while not (run_dir / "checkpoint.pt").exists() and time.monotonic() < deadline:  # what a resume reads first
            time.sleep(0.2)
        metrics = (run_dir / "metrics.jsonl").read_text()
        second = resume_without_actors(str(run_dir), "--transport.base-port", str(free_base_port(4)))  # ports of its own
        assert second.returncode == 2, second.stdout + second.stderr
        assert re.search(rf"run folder {re.escape(str(run_dir))} is in use by the learner with pid {run.proc.pid}", second.stderr)
        assert (run_dir / "metrics.jsonl").read_text().startswith(metrics)  # nothing of the second's written there
        after = run.wait_for(EPOCH, timeout=180, after=run.lines[-1][0])  # the first trains on
        assert after
    finally:
        run.kill()
    RunFolderLock(str(run_dir)).acquire().release()  # the first is gone (killed): the folder is free
