"""A finished run stays finished: the same run started three times (a restarted learner, `--resume latest` under
Compose) writes one final evaluation; the later starts say so and exit 0, and a larger budget continues it."""

import re

from tests.support.launcher import TRAINING, run_fake

ROWS = ("--eval.late-episodes", "1", "--eval.low-epsilon-episodes", "1", "--eval.noop-episodes", "1")
FINAL = ("--eval.final-episodes", "2", "--eval.select-episodes", "2", *ROWS)


def test_a_finished_run_started_again_says_so_and_exits_0_without_evaluating(tmp_path):
    out = run_fake(tmp_path, *TRAINING, "--total-env-steps", "1500", *FINAL)
    assert "env-step budget" in out, out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    result = (run_dir / "eval_final.json").read_bytes()
    mtime = (run_dir / "eval_final.json").stat().st_mtime_ns
    for _ in range(2):  # Compose's restarts: the run's own budget, resumed
        again = run_fake(tmp_path, "--resume", str(run_dir), *FINAL)
        finished = rf"\[MAIN\] {re.escape(str(run_dir))} is finished \([\d,]+ of --total-env-steps 1,500 env steps; "
        assert re.search(finished, again), again
        assert "[MAIN] Epoch" not in again and "[FINAL]" not in again, again  # neither trains nor evaluates
    assert (run_dir / "eval_final.json").read_bytes() == result
    assert (run_dir / "eval_final.json").stat().st_mtime_ns == mtime  # one final evaluation, never rewritten

    more = run_fake(tmp_path, "--resume", str(run_dir), "--total-env-steps", "2500", *FINAL)  # a larger budget goes on
    assert "is finished" not in more and "env-step budget" in more, more
