"""A failure restarting cannot cure stops instead of looping (issue 84 item 3): a learner whose loop raises the same
error at its first turn, started again from one checkpoint as a restart policy would, exits 1 twice, then 3 with a line
naming the error, and every later start from that checkpoint exits 3 at once, training nothing. An error exit
keeps no replay: what it holds may be what failed."""

import re
import subprocess

from launch.failures import EXIT_REPEATED, FAILURES_NAME, REPEATS_TO_STOP
from tests.support.launcher import TRAINING, fake_run_cmd, run_fake
from tests.support.paths import ROOT
from tests.support.runs import free_base_port


def _start_failing(tmp_path, run_dir):
    cmd = fake_run_cmd(tmp_path, free_base_port(4) + 2, "--resume", str(run_dir), "--learner.steps", "1000")
    cmd[1:3] = ["-m", "tests.support.failing_learner"]  # launch.local with an update that always raises
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)


def test_the_same_failure_from_one_checkpoint_stops_the_restarts_with_exit_3(tmp_path):
    run_fake(tmp_path, *TRAINING, "--actors", "1", "--learner.steps", "10")
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    for start in range(1, REPEATS_TO_STOP + 2):
        proc = _start_failing(tmp_path, run_dir)
        out = proc.stdout + proc.stderr
        if start < REPEATS_TO_STOP:
            assert proc.returncode == 1 and "RuntimeError: injected: this update always fails" in out, out
        else:
            assert proc.returncode == EXIT_REPEATED, out
            said = (
                rf"error: {REPEATS_TO_STOP} starts of {re.escape(str(run_dir))} from its checkpoint \(epoch \d+, 10 updates\) "
                r"ended on the same error, 'RuntimeError: injected: this update always fails'; not starting again \(exit 3\)"
            )
            assert re.search(said, out), out
        if start > REPEATS_TO_STOP:  # held back before anything starts
            assert "[MAIN] resumed" not in out and "[PROCESSOR]" not in out, out
        assert not [p.name for p in run_dir.iterdir() if p.name.startswith("replay")], "an error exit kept its replay"
    assert (run_dir / FAILURES_NAME).is_file()
